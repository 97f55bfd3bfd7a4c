"""Sequence repair (``loop.repair_budget``): after the last step, a VLM reviews the accepted images in
order and names the steps that break the sequence's consistency; those are made again with references.

The review: our template (``agents/sequence_review.py``) to ``loop.repair_reviewer`` (default: the
critic's backend), one turn, recorded whole in ``Trace.repair`` (raw replies, seeds, the parsed verdict,
the template's digest). An unusable reply repairs nothing: the error is recorded and the run still
succeeds. Each flagged step, in step order, is regenerated from the image it edited (the previous step's
image, repaired when that step was), with the step's last prompt, and as references
(``ImageRequest.references``) the first image of the sequence (unless it is this step's) and the request's
input images, capped at the generator's ``max_references`` (none when it declares none, as the load-time
check of ``loop.repair_budget`` refuses). Each repair call is
judged by the critic as an attempt is; a rejection refines the prompt; the first accepted image becomes
the step's repaired image, shown in place of the original (``Trace.shown_image``), which the
trace keeps in ``StepRecord.accepted_image``. A step whose repairs were all rejected keeps its image.
Calls: at most ``loop.max_attempts`` per step and ``loop.repair_budget`` in all.

Seeds: a repair call's generator seed is ``call_seed(seed_base, "repair", step, k, c)`` (``agents/seeds.py``)
with the first ``c`` that differs from the step's attempt seeds; the critic's turn for repair ``k`` is
``Turn(seed_base, step, -(k + 1))``, apart from every attempt's turn (attempt numbers are >= 0); the
review's is ``Turn(seed_base)`` under its own role.

Resume: the trace is written after the review and after each finished step repair, so a kill loses at
most the step repair in flight; a rerun keeps the review and the finished repairs and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from interleave_thinker.agents.loop_templates import loop_template_digest
from interleave_thinker.agents.seeds import Turn, call_seed
from interleave_thinker.agents.sequence_review import TEMPLATE, SequenceReviewer, ShownStep
from interleave_thinker.backends.wrapping import reference_cap
from interleave_thinker.core.config import LoopOptions
from interleave_thinker.core.types import (
    WHITE_CANVAS,
    Attempt,
    Flag,
    RepairRecord,
    StepRepair,
    Trace,
)
from interleave_thinker.runtime.attempt_image import Attempts
from interleave_thinker.runtime.recorder import RunRecorder
from interleave_thinker.runtime.used_backends import backend_description


@dataclass(frozen=True)
class Repairer:
    """What repair uses: the sequence reviewer (made once by the pipeline), the attempt procedure of the
    loop's steps (its critic judges each repair call; no judge scores them) and the run's settings."""

    reviewer: SequenceReviewer
    attempts: Attempts
    options: LoopOptions


REPAIR_ROLE = "repair"
"""Names the repair calls' generator seeds (``agents/seeds.py``)."""


def repair_sequence(repairer: Repairer, recorder: RunRecorder, input_images: list[Image.Image]) -> None:
    """Review the finished sequence and repair the steps it flags, within ``loop.repair_budget`` calls."""
    budget = repairer.options.repair_budget
    trace = recorder.trace
    if budget <= 0 or not any(s.kind == "image" and s.accepted_image for s in trace.steps):
        return
    record = trace.repair
    if record is None:
        record = trace.repair = review(repairer, recorder)
        recorder.checkpoint()
    record.steps = [r for r in record.steps if r.complete]  # a repair a kill cut short runs again
    done = {r.step_number for r in record.steps}
    for flag in sorted(record.flagged or [], key=lambda f: f.step):
        left = budget - sum(len(r.attempts) for r in record.steps)
        if flag.step in done or left <= 0:
            continue
        record.steps.append(repair_step(repairer, recorder, flag, left))
        recorder.checkpoint()
    record.complete = True


def review(repairer: Repairer, recorder: RunRecorder) -> RepairRecord:
    """The review of the sequence as it stands: the reviewer's turn, parsed, recorded."""
    shown = [
        ShownStep(index, step.planned_prompt or "", recorder.images[step.accepted_image])
        for index, step in enumerate(recorder.trace.steps, start=1)
        if step.kind == "image" and step.accepted_image
    ]
    result = repairer.reviewer.review(shown, Turn(repairer.options.seed_base))
    error = None
    if result.flags is None:
        detail = "; ".join(result.errors) or "no reply"
        error = f"The sequence review gave no usable verdict ({detail}); no step was repaired."
    return RepairRecord(
        reviewer=backend_description(repairer.reviewer.backend),
        template=loop_template_digest(TEMPLATE),
        budget=repairer.options.repair_budget,
        raw_replies=result.raw_replies,
        seeds=result.seeds,
        errors=result.errors,
        flagged=result.flags,
        error=error,
    )


def repair_seed(seed_base: int, step: int, repair: int, taken: set[int]) -> int:
    """The generator seed of a step's ``repair``-th repair call: derived, and none of ``taken``."""
    call = 0
    while (seed := call_seed(seed_base, REPAIR_ROLE, step, repair, call)) in taken:
        call += 1
    return seed


def repair_step(repairer: Repairer, recorder: RunRecorder, flag: Flag, left: int) -> StepRepair:
    """Up to ``min(loop.max_attempts, left)`` repair calls of step ``flag.step``, until the critic accepts one."""
    trace = recorder.trace
    step = trace.steps[flag.step - 1]
    assert step.accepted_image is not None  # the review shows only steps with an image
    kept = step.accepted_attempt
    planned = step.planned_prompt or ""
    prompt = kept.prompt if kept is not None else planned
    before_name = _shown_name(trace, kept.before_image if kept is not None else WHITE_CANVAS)
    before = None if before_name == WHITE_CANVAS else recorder.images[before_name]
    names = reference_names(trace, flag.step, reference_cap(repairer.attempts.generator))
    references = tuple(recorder.images[name] for name in names)
    repair = StepRepair(
        step_number=flag.step, reason=flag.reason, original_image=step.accepted_image, references=names
    )
    taken = {a.seed for a in step.attempts}
    for k in range(min(repairer.options.max_attempts, left)):
        seed = repair_seed(repairer.options.seed_base, flag.step, k, taken)
        attempt = Attempt(
            step_number=flag.step, attempt=k, prompt=prompt, seed=seed, before_image=before_name
        )
        repair.attempts.append(attempt)
        repairer.attempts.make(
            recorder,
            attempt,
            f"step{flag.step:02d}_repair{k}.png",
            before,
            references,
            planned=planned,
            rewritten=attempt.prompt,
            turn=Turn(repairer.options.seed_base, flag.step, -(k + 1)),
        )
        if attempt.image_file is None:
            continue
        if attempt.accepted:
            repair.repaired_image = attempt.image_file
            break
        if attempt.verdict is not None and attempt.verdict.refine_prompt.strip():
            prompt = attempt.verdict.refine_prompt
    repair.complete = True
    return repair


def reference_names(trace: Trace, step: int, cap: int) -> list[str]:
    """The first image of the sequence as shown (unless it is ``step``'s) and the request's inputs, capped."""
    first = [name for number, name in trace.shown_images()[:1] if number != step]
    names = first + list(trace.input_images)
    return names[:cap]


def _shown_name(trace: Trace, name: str) -> str:
    """The image shown for ``name``: its repaired version when a step's accepted image was repaired."""
    repaired = (
        {r.original_image: r.repaired_image for r in trace.repair.steps if r.repaired_image}
        if trace.repair
        else {}
    )
    return repaired.get(name, name)


def repair_images(trace: Trace) -> set[str]:
    """The images of the finished repairs, which a resumed run keeps."""
    if trace.repair is None:
        return set()
    return {a.image_file for r in trace.repair.steps if r.complete for a in r.attempts if a.image_file}
