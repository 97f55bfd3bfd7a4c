"""Judge scores for attempts that have none, so the score-based rules can decide about them."""

from __future__ import annotations

import json
from pathlib import Path

from interleave_thinker.agents.judge import Judge
from interleave_thinker.core.images import open_rgb
from interleave_thinker.core.messages import white_canvas
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.train.data.trajectories import SCORES_FILE, Trajectory, read_scores


def apply_scores(trajectories: list[Trajectory], scores: dict[str, tuple[float, float]]) -> None:
    for t in trajectories:
        for step in t.steps:
            for a in step.attempts:
                if a.sc is None and a.key in scores:
                    a.sc, a.pq = scores[a.key]


def score_missing(
    trajectories: list[Trajectory], judge: Judge
) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """Score every attempt without SC/PQ; returns the new scores and the judge's errors (never guesses)."""
    found: dict[str, tuple[float, float]] = {}
    errors: list[str] = []
    for t in trajectories:
        for step in t.steps:
            for a in step.attempts:
                if a.sc is not None and a.pq is not None:
                    continue
                before = open_rgb(str(a.before)) if a.before else white_canvas()
                result = judge.judge(before, open_rgb(str(a.after)), a.planned_prompt)
                if result.ok and result.sc is not None and result.pq is not None:
                    a.sc, a.pq = result.sc, result.pq
                    found[a.key] = (result.sc, result.pq)
                else:
                    errors.append(f"{a.key}: {result.error}")
    return found, errors


def load_cache(out: Path) -> dict[str, tuple[float, float]]:
    return read_scores(out)


def save_cache(out: Path, scores: dict[str, tuple[float, float]]) -> None:
    merged = {**read_scores(out), **scores}
    write_atomic(
        out / SCORES_FILE, json.dumps({k: list(v) for k, v in sorted(merged.items())}, indent=2) + "\n"
    )
