"""UEval: the benchmark (protocol.py: reader, layout, protocol, published numbers) and its scorer."""

from interleave_thinker.eval.benchmarks.ueval.protocol import BENCHMARK

__all__ = ["BENCHMARK"]
