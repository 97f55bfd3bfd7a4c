"""Best attempt kept (``loop.select_best``): when the critic accepted none of a step's attempts, keep the
best one instead of the last, and say in the trace which and why (``StepRecord.selected``).

A step accepted none when its kept attempt is forced: the last one, accepted without a verdict (the
release's forcing pass) or after every verdict said no (``loop.critic_on_last_attempt``). Then:

- ``critic``: the critic's model ranks every attempt that has an image in one turn (our template,
  ``agents/ranking.py``); its first is kept. An unusable ranking keeps the last, with the error.
- ``judge``: the attempt with the best overall judge score sqrt(SC * PQ) is kept (every attempt is
  scored as it is made when a judge is configured); a tie goes to the later attempt, the one the
  release would have kept; with no scored attempt the last is kept.
- ``off``: nothing here runs; the release's last attempt stays.

The kept attempt becomes the accepted one (``accepted`` and ``forced``: kept without the critic's
approval), so pages, resume and training data read the step as before.
"""

from __future__ import annotations

import math

from PIL import Image

from interleave_thinker.agents.messages import white_canvas
from interleave_thinker.agents.ranking import Ranker
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.core.config import LoopOptions
from interleave_thinker.core.types import Attempt, Selection, StepRecord
from interleave_thinker.runtime.recorder import RunRecorder


def keep_best(
    ranker: Ranker,
    options: LoopOptions,
    recorder: RunRecorder,
    index: int,
    record: StepRecord,
    latest: tuple[Image.Image, str] | None,
) -> None:
    """With ``loop.select_best`` on and no attempt of step ``index`` accepted, keep the best one
    (``ranker``: the critic's model asked to rank, made once by the pipeline)."""
    mode = options.select_best
    kept = record.accepted_attempt
    if mode == "off" or kept is None or not kept.forced:
        return
    candidates = [a for a in record.attempts if a.image_file]
    if len(candidates) < 2:
        return
    if mode == "judge":
        selection = by_judge(candidates)
    else:
        before = latest[0] if latest else white_canvas()
        selection = by_critic(ranker, Turn(options.seed_base, index), recorder, record, candidates, before)
    chosen = next(a for a in candidates if a.attempt == selection.attempt)
    kept.accepted = kept.forced = False
    chosen.accepted = chosen.forced = True
    record.accepted_image = chosen.image_file
    record.selected = selection


def overall(attempt: Attempt) -> float | None:
    """The judge's overall score of an attempt, sqrt(SC * PQ), or None when it was not scored."""
    scores = attempt.scores
    if scores is None or scores.sc is None or scores.pq is None:
        return None
    return math.sqrt(scores.sc * scores.pq)


def by_judge(candidates: list[Attempt]) -> Selection:
    """The attempt with the best overall score (a tie: the later one); the last when none was scored."""
    scored = [(value, a) for a in candidates if (value := overall(a)) is not None]
    if not scored:
        last = candidates[-1]
        return Selection(
            attempt=last.attempt, by="judge", reason="no attempt has judge scores: the last is kept"
        )
    value, best = max(scored, key=lambda pair: (pair[0], pair[1].attempt))
    assert best.scores is not None
    return Selection(
        attempt=best.attempt,
        by="judge",
        reason=f"best judge score sqrt(SC*PQ) = {value:.3g} (SC {best.scores.sc:g}, PQ {best.scores.pq:g}) "
        f"of {len(scored)} scored attempt(s)",
    )


def by_critic(
    ranker: Ranker,
    turn: Turn,
    recorder: RunRecorder,
    record: StepRecord,
    candidates: list[Attempt],
    before: Image.Image,
) -> Selection:
    """The attempt the critic's model ranks first (one turn); the last when no ranking was usable."""
    result = ranker.rank(
        before=before,
        attempts=[recorder.images[a.image_file] for a in candidates if a.image_file],
        instruction=record.planned_prompt or "",
        turn=turn,
    )
    if result.ranking is None:
        error = "; ".join(result.errors) or "the critic gave no ranking"
        return Selection(
            attempt=candidates[-1].attempt,
            by="critic",
            reason="no usable ranking: the last attempt is kept",
            raw_replies=result.raw_replies,
            seeds=result.seeds,
            error=error,
        )
    best = candidates[result.ranking.order[0] - 1]
    return Selection(
        attempt=best.attempt,
        by="critic",
        reason=f"ranked first of {len(candidates)} (ranking {result.ranking.order})"
        + (f": {result.ranking.reason}" if result.ranking.reason else ""),
        raw_replies=result.raw_replies,
        seeds=result.seeds,
    )
