"""WISE: the benchmark (protocol.py: reader, layout, the two protocols, published numbers) and its scorer."""

from interleave_thinker.eval.benchmarks.wise.protocol import BENCHMARK

__all__ = ["BENCHMARK"]
