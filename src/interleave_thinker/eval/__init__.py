"""Benchmark evaluation: UEval, WISE and RISEBench items, generation in the official layouts, scoring, reports.

Imported only by the CLI; every module imports its heavy dependencies inside functions.
"""

BENCHMARKS = ("ueval", "wise", "rise")
