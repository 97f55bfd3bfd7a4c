"""``consistency``: our own measure of a sequence (protocol.py: reader, pinned rubric, protocol) and its scorer."""

from interleave_thinker.eval.benchmarks.consistency.protocol import BENCHMARK

__all__ = ["BENCHMARK"]
