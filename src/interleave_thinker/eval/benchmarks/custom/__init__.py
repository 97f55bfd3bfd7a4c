"""``custom``: your own questions and rubrics, scored UEval-style (protocol.py: reader, texts, protocol)."""

from interleave_thinker.eval.benchmarks.custom.protocol import BENCHMARK

__all__ = ["BENCHMARK"]
