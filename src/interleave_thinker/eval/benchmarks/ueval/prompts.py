"""UEval's judge prompts: ``.strip()``-ed module-level literals of its ``ueval_eval.py`` at the pinned
commit, each pinned in ``prompts.json``; and the official filling."""

from __future__ import annotations

from interleave_thinker.eval.prompts import pinned_prompts

REPO, PROMPTS = pinned_prompts(__name__)


def fill(template: str, question: str, text_answer: str | None = None, rubric: str | None = None) -> str:
    """UEval's chained ``.replace`` calls, in the official order."""
    if rubric is not None:
        return template.replace("<<rubric_item>>", rubric)
    return template.replace("<<question>>", question).replace("<<text_answer>>", text_answer or "")
