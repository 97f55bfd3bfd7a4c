"""Best attempt kept (``loop.select_best``): when the critic accepted none of a step's attempts, keep the
best one instead of the last, and say in the trace which and why (``StepRecord.selected``). With
``loop.candidates``, also when the critic accepted more than one attempt of a round: the best of those is
kept instead of the first in seed order.

A step accepted none when its kept attempt is forced: the last one, accepted without a verdict (the
release's forcing pass) or after every verdict said no (``loop.critic_on_last_attempt``); then every
attempt with an image is compared. A round of candidates can hold several attempts the critic accepted
(one round only: the loop stops after it); then those are compared (:func:`compared`). In either case:

- ``critic``: the critic's model ranks every attempt that has an image in one turn (our template,
  ``agents/ranking.py``); its first is kept. An unusable ranking keeps the last (the first accepted, when
  accepted candidates were compared), with the error.
- ``judge``: the attempt with the best overall judge score sqrt(SC * PQ) is kept (every attempt is
  scored as it is made when a judge is configured); a tie goes to the later attempt, the one the
  release would have kept; with no scored attempt the last is kept.
- ``off``: nothing here runs; the release's last attempt stays.

The kept attempt becomes the accepted one (``accepted``; and ``forced`` when the critic accepted none:
kept without its approval), so pages, resume and training data read the step as before. Why the
accepted candidates are compared too: a round is N images made side by side for one step, and keeping the
first one the critic let through, by seed, leaves the choice to the seed (docs/notes/decisions.md).
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
    if mode == "off" or kept is None:
        return
    candidates = compared(record)
    # forced: the critic accepted none, every attempt is compared; else only several accepted ones are
    if len(candidates) < 2 or not (kept.forced or all(approved(a) for a in candidates)):
        return
    if mode == "judge":
        selection = by_judge(candidates)
    else:
        before = latest[0] if latest else white_canvas()
        selection = by_critic(ranker, Turn(options.seed_base, index), recorder, record, candidates, before)
    chosen = next(a for a in candidates if a.attempt == selection.attempt)
    forced = kept.forced  # the critic accepted none: the kept one goes without its approval
    kept.accepted = kept.forced = False
    chosen.accepted, chosen.forced = True, forced
    record.accepted_image = chosen.image_file
    record.selected = selection


def approved(attempt: Attempt) -> bool:
    """Whether the critic's verdict on ``attempt`` said yes."""
    return attempt.verdict is not None and attempt.verdict.success


def compared(record: StepRecord) -> list[Attempt]:
    """The attempts ``loop.select_best`` compares at a step, in attempt order: the ones the critic accepted
    when there are several (a round of candidates), else every attempt with an image. Read from the record
    alone, so the pages find the ranked attempts in a finished trace."""
    made = [a for a in record.attempts if a.image_file]
    accepted = [a for a in made if approved(a)]
    return accepted if len(accepted) > 1 else made


def overall(attempt: Attempt) -> float | None:
    """The judge's overall score of an attempt, sqrt(SC * PQ), or None when it was not scored."""
    scores = attempt.scores
    if scores is None or scores.sc is None or scores.pq is None:
        return None
    return math.sqrt(scores.sc * scores.pq)


def by_judge(candidates: list[Attempt]) -> Selection:
    """The attempt with the best overall score; with none scored, the one the loop kept. A tie goes to the
    one the loop would keep: the later attempt when the critic accepted none, else the earlier."""
    accepted = all(approved(a) for a in candidates)
    scored = [(value, a) for a in candidates if (value := overall(a)) is not None]
    if not scored:
        kept = candidates[0] if accepted else candidates[-1]
        return Selection(
            attempt=kept.attempt, by="judge", reason=f"no attempt has judge scores: {_kept_words(accepted)}"
        )
    order = -1 if accepted else 1
    value, best = max(scored, key=lambda pair: (pair[0], order * pair[1].attempt))
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
    """The attempt the critic's model ranks first (one turn); the one the loop kept when no ranking was
    usable (the last attempt; the first accepted when the critic accepted several)."""
    result = ranker.rank(
        before=before,
        attempts=[recorder.images[a.image_file] for a in candidates if a.image_file],
        instruction=record.planned_prompt or "",
        turn=turn,
    )
    accepted = all(approved(a) for a in candidates)
    if result.ranking is None:
        error = "; ".join(result.errors) or "the critic gave no ranking"
        return Selection(
            attempt=(candidates[0] if accepted else candidates[-1]).attempt,
            by="critic",
            reason=f"no usable ranking: {_kept_words(accepted)}",
            raw_replies=result.raw_replies,
            seeds=result.seeds,
            error=error,
        )
    best = candidates[result.ranking.order[0] - 1]
    return Selection(
        attempt=best.attempt,
        by="critic",
        reason=f"ranked first of {len(candidates)}{' accepted' if accepted else ''} "
        f"(ranking {result.ranking.order})" + (f": {result.ranking.reason}" if result.ranking.reason else ""),
        raw_replies=result.raw_replies,
        seeds=result.seeds,
    )


def _kept_words(accepted: bool) -> str:
    return "the first accepted attempt is kept" if accepted else "the last attempt is kept"
