"""The step loop: plan, then for each step generate, ask the critic, accept or retry with a refined prompt.

Defaults follow the released UEval runner: three attempts per step, the last accepted without a
critic call ("forcing pass"), seeds ``step_number * 100 + attempt``, step 1 of a narrative request is
text-to-image, every other step edits the latest image, and the critic's "before" image of a
text-to-image attempt is a 1024x1024 white canvas.
"""

from __future__ import annotations

import time

from PIL import Image

from interleave_thinker.agents.critic import Critic
from interleave_thinker.agents.messages import white_canvas
from interleave_thinker.agents.planner import Planner, single_step_plan
from interleave_thinker.agents.retry import BACKEND_ERROR_PREFIX
from interleave_thinker.backends.protocols import ImageBackend, ImageRequest
from interleave_thinker.core.config import GenerationOptions, LoopOptions
from interleave_thinker.core.errors import InterleaveThinkerError, PlanningError
from interleave_thinker.core.types import WHITE_CANVAS, Attempt, Durations, PlanStep, StepRecord
from interleave_thinker.runtime.observer import Observer
from interleave_thinker.runtime.recorder import RunRecorder


class StepLoop:
    def __init__(
        self,
        *,
        planner: Planner,
        critic: Critic,
        generator: ImageBackend,
        loop: LoopOptions,
        generation: GenerationOptions,
        observer: Observer | None = None,
    ) -> None:
        self.planner = planner
        self.critic = critic
        self.generator = generator
        self.loop = loop
        self.generation = generation
        self.observer = observer or Observer()

    def seed(self, step_index: int, attempt: int) -> int:
        return self.loop.seed_base + step_index * self.loop.seed_stride + attempt

    def run(self, recorder: RunRecorder, input_images: list[Image.Image], input_names: list[str]) -> None:
        """Run one request to the end, recording every call; raises only :class:`PlanningError`.

        A trace that already holds a plan and complete steps (a resumed run) keeps them: planning is
        skipped and the loop continues at the first step without a complete record.
        """
        trace = recorder.trace
        # 1. Plan (unless resuming with a plan on disk).
        if trace.planner.plan is None:
            self._plan(recorder, input_images)
        plan = trace.planner.plan
        assert plan is not None
        self.observer.on_plan(plan)

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
            self._run_step(recorder, index, step_record, latest)
            step_record.complete = True
            recorder.checkpoint()
            self.observer.on_step_end(index, step_record)
            if step_record.kind == "image":
                if step_record.accepted_image is None:
                    trace.status = "failed"
                    trace.error = f"Step {index} produced no image: " + "; ".join(
                        a.generation_error or "" for a in step_record.attempts
                    )
                    recorder.checkpoint()
                    return
                latest = (recorder.images[step_record.accepted_image], step_record.accepted_image)
        trace.status = "succeeded"
        recorder.checkpoint()

    def _plan(self, recorder: RunRecorder, input_images: list[Image.Image]) -> None:
        trace = recorder.trace
        self.observer.on_planning()
        record = self.planner.plan(trace.request.text, input_images)
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
        self, recorder: RunRecorder, index: int, record: StepRecord, latest: tuple[Image.Image, str] | None
    ) -> None:
        planned = record.planned_prompt
        if planned is None:
            return
        prompt = planned
        for attempt_index in range(self.loop.max_attempts):
            attempt = self._attempt(recorder, index, attempt_index, planned, prompt, latest)
            record.attempts.append(attempt)
            recorder.checkpoint()
            self.observer.on_attempt_end(index, attempt)
            if attempt.accepted:
                record.accepted_image = attempt.image_file
                break
            if attempt.verdict is not None and attempt.verdict.refine_prompt.strip():
                prompt = attempt.verdict.refine_prompt
        else:
            # Every attempt was seen and rejected by the critic (critic_on_last_attempt): keep the last
            # image so the sequence goes on, and say so.
            last = next((a for a in reversed(record.attempts) if a.image_file), None)
            if last is not None:
                last.accepted = last.forced = True
                record.accepted_image = last.image_file

    def _attempt(
        self,
        recorder: RunRecorder,
        index: int,
        attempt_index: int,
        planned: str,
        prompt: str,
        latest: tuple[Image.Image, str] | None,
    ) -> Attempt:
        seed = self.seed(index, attempt_index)
        attempt = Attempt(
            step_number=index,
            attempt=attempt_index,
            prompt=prompt,
            seed=seed,
            before_image=latest[1] if latest else WHITE_CANVAS,
        )
        self.observer.on_attempt_start(index, attempt_index, prompt)
        durations = Durations()
        start = time.perf_counter()
        try:
            request = ImageRequest(
                prompt,
                image=latest[0] if latest else None,
                width=self.generation.width,
                height=self.generation.height,
                seed=seed,
                steps=self.generation.steps,
                guidance=self.generation.guidance,
            )
            image = self.generator.generate(request)
        except InterleaveThinkerError as exc:
            attempt.generation_error = str(exc)
            return attempt
        finally:
            durations.generate_s = round(time.perf_counter() - start, 4)
            attempt.durations = durations
        attempt.image_file = recorder.add_image(f"step{index:02d}_attempt{attempt_index}.png", image)

        is_last = attempt_index == self.loop.max_attempts - 1
        if is_last and not self.loop.critic_on_last_attempt:
            attempt.accepted = attempt.forced = True
            return attempt
        result = self.critic.review(
            before=latest[0] if latest else white_canvas(),
            after=image,
            original_instruction=planned,
            rewritten_prompt=prompt,
        )
        attempt.critic_called = True
        attempt.critic_raw = result.raw_replies
        attempt.verdict = result.verdict
        durations.critic_s = round(result.duration_s, 4)
        if result.verdict is None:
            attempt.critic_error = "; ".join(result.errors) or "the critic gave no reply"
        else:
            attempt.accepted = result.verdict.success
        return attempt


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
