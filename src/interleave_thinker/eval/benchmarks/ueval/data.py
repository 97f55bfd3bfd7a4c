"""UEval's data: a JSON list, JSONL or Parquet file, or ``hf:ID[:split]``; ``task`` (``task_type`` in
older copies) is the category."""

from __future__ import annotations

from interleave_thinker.eval.datasets import EvalItem, load_questions

NAME = "ueval"


def load(data: str) -> list[EvalItem]:
    """UEval: ``id``, ``prompt``, ``task``; rubrics and ``question_type`` kept in ``raw``."""
    return load_questions(data, NAME, "task")
