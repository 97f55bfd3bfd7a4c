"""The step loop: plan, then for each step generate, ask the critic, accept or retry with a refined prompt.

Defaults follow the released UEval runner: three attempts per step, the last accepted without a
critic call ("forcing pass"), seeds ``step_number * 100 + attempt``, step 1 of a narrative request is
text-to-image, every other step edits the latest image, and the critic's "before" image of a
text-to-image attempt is a 1024x1024 white canvas. Every planner and critic call carries a seed derived
from ``loop.seed_base``, its step and attempt (``agents/seeds.py``), recorded in the trace.

The authors' data-generation loop is a choice of settings of this one loop (``loop.*``): the critic on
every attempt, a budget of generator calls per request instead of a limit per step, an empty
``rewritten_prompt`` on a first attempt; with a judge, every attempt is also scored (SC/PQ) as it is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

from PIL import Image

from interleave_thinker.agents.critic import Critic
from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.planner import Planner, single_step_plan
from interleave_thinker.agents.ranking import Ranker
from interleave_thinker.agents.retry import BACKEND_ERROR_PREFIX
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.agents.sequence_review import SequenceReviewer
from interleave_thinker.backends.protocols import ImageBackend
from interleave_thinker.backends.wrapping import reference_cap
from interleave_thinker.core.config import GenerationOptions, LoopOptions
from interleave_thinker.core.errors import PlanningError
from interleave_thinker.core.types import (
    WHITE_CANVAS,
    Attempt,
    PlanStep,
    StepRecord,
    Trace,
)
from interleave_thinker.runtime.attempt_image import Attempts
from interleave_thinker.runtime.candidates import keep_first_accepted, next_prompt, run_round
from interleave_thinker.runtime.observer import Observer
from interleave_thinker.runtime.recorder import RunRecorder
from interleave_thinker.runtime.references import References
from interleave_thinker.runtime.repair import Repairer, repair_sequence
from interleave_thinker.runtime.selection import keep_best
from interleave_thinker.runtime.speculation import Speculator, on_private_loop


@dataclass(kw_only=True, eq=False)
class StepLoop:
    """One request's loop over the pipeline's agents and generator, with the run's settings."""

    planner: Planner
    critic: Critic
    generator: ImageBackend
    loop: LoopOptions
    generation: GenerationOptions
    observer: Observer = field(default_factory=Observer)
    ranker: Ranker
    """Ranks a step's attempts for ``loop.select_best: critic`` (made once by the pipeline)."""
    sequence_reviewer: SequenceReviewer
    """Reviews the finished sequence for ``loop.repair_budget`` (made once by the pipeline)."""
    judge: Judge | None = None
    references: References | None = field(default=None, init=False)
    """Each attempt's reference images (``loop.references``), set for the request :meth:`run` runs."""
    attempts: Attempts = field(init=False)
    """How an attempt is made (steps and repairs alike: ``runtime/attempt_image.py``)."""
    speculator: Speculator | None = field(default=None, init=False)
    """The calls made ahead for the request :meth:`run` runs (``loop.speculate``)."""

    def __post_init__(self) -> None:
        self.attempts = Attempts(self.critic, self.generator, self.generation, self.judge)

    def seed(self, step_index: int, attempt: int) -> int:
        return self.loop.seed_base + step_index * self.loop.seed_stride + attempt

    def run(self, recorder: RunRecorder, input_images: list[Image.Image], input_names: list[str]) -> None:
        """Run one request to the end, recording every call; raises only :class:`PlanningError`.
        With ``loop.speculate`` it runs on an event loop, where calls made ahead overlap (runtime/speculation.py).

        A trace that already holds a plan and complete steps (a resumed run) keeps them: planning is
        skipped and the loop continues at the first step without a complete record. So the trace is
        written when it gains what a resume keeps: after the plan and after every step but the last
        and a failed one, whose write is the caller's closing one (``Pipeline._close_trace``). Not after an attempt: a
        resume drops an unfinished step, attempts and all, and each write is a file created (about
        a third of a batch's CPU goes to creating files, docs/notes/scale.md).
        """
        body = partial(self._run, recorder, input_images, input_names)
        try:
            on_private_loop(body) if self.loop.speculate else body()
        finally:
            if self.speculator is not None:
                self.speculator.close()  # every call still made ahead is discarded

    def _run(self, recorder: RunRecorder, input_images: list[Image.Image], input_names: list[str]) -> None:
        trace = recorder.trace
        self.references = self._references(recorder, input_images, input_names)
        # 1. Plan (unless resuming with a plan on disk).
        if trace.planner.plan is None:
            self._plan(recorder, input_images)
        plan = trace.planner.plan
        assert plan is not None
        self.observer.on_plan(plan)
        if self.loop.speculate:
            self.speculator = self._speculator(trace, plan.steps)

        # 2. Steps, in order; each image step starts from the latest image of the sequence.
        trace.steps = [s for s in trace.steps if s.complete]
        latest: tuple[Image.Image, str] | None = (input_images[-1], input_names[-1]) if input_images else None
        for done in trace.steps:
            if done.accepted_image is not None:
                latest = (recorder.images[done.accepted_image], done.accepted_image)
        for index, step in enumerate(plan.steps, start=1):
            if index <= len(trace.steps):
                continue
            step_record = self._new_step(step)
            trace.steps.append(step_record)
            self._run_step(recorder, index, step_record, latest, self._attempt_limit(trace))
            step_record.complete = True
            # the last step's trace, like a failed one's, is the caller's closing write
            if index < len(plan.steps) and not step_record.failed:
                recorder.checkpoint()
            self.observer.on_step_end(index, step_record)
            if step_record.kind == "image":
                if step_record.accepted_image is None:
                    self._fail_step(trace, index, step_record)
                    return
                latest = (recorder.images[step_record.accepted_image], step_record.accepted_image)
        repairer = Repairer(self.sequence_reviewer, replace(self.attempts, judge=None), self.loop)
        repair_sequence(repairer, recorder, input_images)
        trace.status = "succeeded"  # written by the caller's closing checkpoint (``Pipeline._close_trace``)

    def _speculator(self, trace: Trace, steps: list[PlanStep]) -> Speculator:
        prompts = {i: self._generation_prompt(step) for i, step in enumerate(steps, start=1)}
        planned = {i: p for i, p in prompts.items() if p is not None}
        return Speculator(
            self.loop, self.generator, self.generation, planned, self.seed, self.references, trace
        )

    def _references(
        self, recorder: RunRecorder, input_images: list[Image.Image], input_names: list[str]
    ) -> References:
        """The request's reference chooser; its anchor comes from the trace, so a resumed run has it."""
        inputs = list(zip(input_images, input_names, strict=True))
        chosen = References(
            self.loop.references, inputs, recorder.trace, recorder.images, reference_cap(self.generator)
        )
        chosen.note_template()
        return chosen

    def _attempt_limit(self, trace: Trace) -> int:
        """Generator calls the next step may make: ``max_attempts``, or what the request's budget has left."""
        budget = self.loop.generator_budget
        if budget is None:
            return self.loop.max_attempts
        used = sum(len(s.attempts) for s in trace.steps)
        return max(0, budget - used)

    def _fail_step(self, trace: Trace, index: int, record: StepRecord) -> None:
        """Mark the request failed at step ``index``; the caller's closing write stores it (one write, not
        three: the step's checkpoint, this one and the closing one all held the same trace)."""
        trace.status = "failed"
        if not record.attempts and self.loop.generator_budget is not None:
            trace.error = (
                f"Step {index} got no generator call: the budget of {self.loop.generator_budget} calls per "
                "request (loop.generator_budget) was used up by the steps before it."
            )
        else:
            errors = dict.fromkeys(a.generation_error or "" for a in record.attempts)  # each error once
            tries = f" ({len(record.attempts)} attempts)" if len(record.attempts) > 1 else ""
            trace.error = f"Step {index} produced no image: " + "; ".join(errors) + tries

    def _plan(self, recorder: RunRecorder, input_images: list[Image.Image]) -> None:
        trace = recorder.trace
        self.observer.on_planning()
        record = self.planner.plan(trace.request.text, input_images, Turn(self.loop.seed_base))
        trace.planner = record
        if record.plan is None:
            # The fallback is for a planner that answered badly, never for one that did not answer.
            unanswered = bool(record.errors) and record.errors[-1].startswith(BACKEND_ERROR_PREFIX)
            if unanswered or self.loop.planner_fallback != "single-step":
                trace.status = "failed"
                trace.error = (
                    _planner_unreachable(record.errors[-1])
                    if unanswered
                    else _planning_failure(len(record.raw_replies), record.errors)
                )
                recorder.checkpoint()
                raise PlanningError(trace.error, raw_replies=record.raw_replies)
            record.plan = single_step_plan(trace.request.text)
            trace.warnings.append(
                "The planner returned no valid plan; the request ran as a single-step plan."
            )
        recorder.checkpoint()

    def _generation_prompt(self, step: PlanStep) -> str | None:
        if step.is_text_answer and self.loop.text_steps == "generate":
            return step.auxiliary_text
        return step.generation_prompt

    def _new_step(self, step: PlanStep) -> StepRecord:
        planned = self._generation_prompt(step)
        kind = "text" if planned is None else "image"
        return StepRecord(step=step, kind=kind, text=step.output_text, planned_prompt=planned)

    def _run_step(
        self,
        recorder: RunRecorder,
        index: int,
        record: StepRecord,
        latest: tuple[Image.Image, str] | None,
        limit: int,
    ) -> None:
        """Up to ``limit`` attempts, until the critic accepts one (or the last is forced); they go out in
        rounds of ``loop.candidates`` (one: the released sequential loop; runtime/candidates.py)."""
        planned = record.planned_prompt
        if planned is None:
            return
        prompt = planned
        size = self.loop.candidates
        for first in range(0, limit, size):
            if first and self.speculator is not None:
                self.speculator.round_over(index)
            attempts = run_round(
                [
                    partial(self._attempt, recorder, index, i, planned, prompt, latest, last=i == limit - 1)
                    for i in range(first, min(first + size, limit))
                ]
            )
            kept = keep_first_accepted(attempts)
            for attempt in attempts:
                record.attempts.append(attempt)
                self.observer.on_attempt_end(index, attempt)
            if kept is not None:
                record.accepted_image = kept.image_file
                break
            prompt = next_prompt(attempts, prompt)
        else:
            # Every attempt was seen and rejected by the critic (critic_on_last_attempt): keep the last
            # image so the sequence goes on, and say so.
            last = next((a for a in reversed(record.attempts) if a.image_file), None)
            if last is not None:
                last.accepted = last.forced = True
                record.accepted_image = last.image_file
        keep_best(self.ranker, self.loop, recorder, index, record, latest)

    def _attempt(
        self,
        recorder: RunRecorder,
        index: int,
        attempt_index: int,
        planned: str,
        prompt: str,
        latest: tuple[Image.Image, str] | None,
        *,
        last: bool,
    ) -> Attempt:
        """One attempt (``runtime/attempt_image.py``): the generator call, then (unless forced) the
        critic's verdict and (with a judge) the scores."""
        references = self.references.for_attempt(latest) if self.references else []
        attempt = Attempt(
            step_number=index,
            attempt=attempt_index,
            prompt=prompt,
            seed=self.seed(index, attempt_index),
            before_image=latest[1] if latest else WHITE_CANVAS,
            references=[name for _, name in references],
        )
        self.observer.on_attempt_start(index, attempt_index, prompt)
        images = [ref for ref, _ in references]
        first_empty = attempt_index == 0 and self.loop.first_rewritten_prompt == "empty"
        speculator, ahead = self.speculator, attempt_index % self.loop.candidates == 0  # a round's first
        made = speculator.take(attempt) if speculator is not None else None
        on_image = (
            partial(_made_from, speculator, recorder, index) if speculator is not None and ahead else None
        )
        self.attempts.make(
            recorder,
            attempt,
            f"step{index:02d}_attempt{attempt_index}.png",
            latest[0] if latest else None,
            images,
            planned=planned,
            rewritten="" if first_empty else prompt,
            turn=Turn(self.loop.seed_base, index, attempt_index),
            forced=last and not self.loop.critic_on_last_attempt,
            critic_references=images,  # judged for consistency with them too, when there are some
            made=made,
            on_image=on_image,
        )
        return attempt


def _made_from(speculator: Speculator, recorder: RunRecorder, index: int, name: str) -> None:
    """An attempt that may be kept has its image: the next step's first call starts from it."""
    speculator.start(index, (recorder.images[name], name))


def _planner_unreachable(error: str) -> str:
    return (
        f"The planner did not answer ({error}). Check that its server is up and reachable; "
        "--planner-fallback applies only to a planner that answered with no valid plan."
    )


def _planning_failure(replies: int, errors: list[str]) -> str:
    detail = errors[-1] if errors else "no reply"
    return (
        f"The planner returned no valid plan in {replies} repl{'y' if replies == 1 else 'ies'} "
        f"(last problem: {detail}). Use --planner-fallback single-step to run the request as one step."
    )
