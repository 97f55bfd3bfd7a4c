"""Benchmark evaluation: UEval, WISE, RISEBench and custom rubric items, generation in the official
layouts, scoring, reports. Each benchmark is one module of :mod:`interleave_thinker.eval.benchmarks`.

Imported only by the CLI; every module imports its heavy dependencies inside functions.
"""
