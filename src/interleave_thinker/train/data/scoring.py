"""Judge scores for attempts that have none, so the score-based rules can decide about them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.messages import white_canvas
from interleave_thinker.core.images import open_rgb
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.train.data.trajectories import SCORES_FILE, AttemptView, Trajectory, read_scores

ERRORS_FILE = "judge_errors.jsonl"


def apply_scores(trajectories: list[Trajectory], scores: dict[str, tuple[float, float]]) -> None:
    for t in trajectories:
        for step in t.steps:
            for a in step.attempts:
                if a.sc is None and a.key in scores:
                    a.sc, a.pq = scores[a.key]


def unscored(trajectories: list[Trajectory]) -> list[AttemptView]:
    """Attempts without SC/PQ, in order: what a judge pass has to score (its progress total)."""
    return [
        a for t in trajectories for step in t.steps for a in step.attempts if a.sc is None or a.pq is None
    ]


def score_missing(
    trajectories: list[Trajectory], judge: Judge, on_each: Callable[[], None] | None = None
) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """Score every attempt without SC/PQ; returns the new scores and the judge's errors (never guesses).

    ``on_each`` is called after each judgement (a progress bar). Errors may quote model replies:
    callers keep them off the terminal (``data build`` writes them to :data:`ERRORS_FILE`).
    """
    found: dict[str, tuple[float, float]] = {}
    errors: list[str] = []
    for a in unscored(trajectories):
        before = open_rgb(str(a.before)) if a.before else white_canvas()
        result = judge.judge(before, open_rgb(str(a.after)), a.planned_prompt)
        if result.ok and result.sc is not None and result.pq is not None:
            a.sc, a.pq = result.sc, result.pq
            found[a.key] = (result.sc, result.pq)
        else:
            errors.append(f"{a.key}: {result.error}")
        if on_each is not None:
            on_each()
    return found, errors


def save_errors(out: Path, errors: list[str]) -> Path:
    """The judge's errors of the last pass, one JSON string a line (replaced on every build)."""
    path = out / ERRORS_FILE
    write_atomic(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors))
    return path


def load_cache(out: Path) -> dict[str, tuple[float, float]]:
    return read_scores(out)


def save_cache(out: Path, scores: dict[str, tuple[float, float]]) -> None:
    merged = {**read_scores(out), **scores}
    write_atomic(
        out / SCORES_FILE, json.dumps({k: list(v) for k, v in sorted(merged.items())}, indent=2) + "\n"
    )
