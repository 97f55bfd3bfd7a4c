"""The page's picture of a run in progress, updated event by event (no HTML here, see render.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from interleave_thinker.core.run_folder import image_path
from interleave_thinker.core.types import Attempt, Plan, StepRecord, Trace
from interleave_thinker.runtime.pipeline import Result
from interleave_thinker.ui.thumbs import data_uri
from interleave_thinker.ui.worker import Event

MAX_CAPTION = 240
"""Characters of a gallery caption: the step's text is clipped there (the final page has all of it)."""


@dataclass
class AttemptView:
    step: int
    attempt: int
    prompt: str
    phase: str = "generating"  # generating -> reviewing -> done
    thumb: str | None = None  # data: URI of the attempt's image
    record: Attempt | None = None


def _clip(text: str, limit: int = MAX_CAPTION) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class RunView:
    """Everything shown for one run; ``apply`` folds one worker event into it."""

    notice: str | None = None
    phase: str = "waiting"  # waiting, planning, running, done, cancelled, error; refused (bad input)
    plan: Plan | None = None
    attempts: dict[tuple[int, int], AttemptView] = field(default_factory=dict)
    steps: dict[int, StepRecord] = field(default_factory=dict)
    result: Result | None = None
    error: str | None = None
    run_dir: Path | None = None
    """The run's folder: the gallery shows its ``images/`` files, so a download keeps their names."""
    tiny_plan: str | None = None
    """The one line saying the plan comes from a format-trained stand-in (tiny planner), else None."""
    redo: str | None = None
    """For a redo, the line saying which step is made again and which are kept (shown with the status)."""

    def keep_steps(self, parent: Trace, step: int) -> None:
        """Show the plan and the steps before ``step`` of the run a redo starts from, as they are: the
        redo copies them without a call, so the loop reports none of them."""
        self.plan = parent.planner.plan.model_copy(deep=True) if parent.planner.plan else None
        for index, record in enumerate(parent.steps[: step - 1], start=1):
            self.steps[index] = record
            for attempt in record.attempts:
                self.attempts[(index, attempt.attempt)] = AttemptView(
                    index, attempt.attempt, attempt.prompt, "done", record=attempt
                )
        kept = "no step is" if step == 1 else "step 1 is" if step == 2 else f"steps 1 to {step - 1} are"
        self.redo = f"Redo from step {step}: {kept} kept from the last run as it was, with no model call."

    def apply(self, event: Event) -> None:
        key = (event.step, event.attempt)
        if event.kind == "planning":
            self.phase = "planning"
        elif event.kind == "plan":
            self.plan, self.phase = event.payload, "running"
        elif event.kind == "attempt_start":
            self.attempts[key] = AttemptView(event.step, event.attempt, str(event.payload))
        elif event.kind == "image" and key in self.attempts:
            self.attempts[key].thumb = data_uri(event.payload)
        elif event.kind == "critic" and key in self.attempts:
            self.attempts[key].phase = "reviewing"
        elif event.kind == "attempt_end" and key in self.attempts:
            view = self.attempts[key]
            view.phase, view.record = "done", event.payload
        elif event.kind == "step_end":
            self.steps[event.step] = event.payload
        elif event.kind == "done":
            self.result = event.payload
            self.phase = "done" if self.result is not None and self.result.ok else "error"
            if self.result is not None and not self.result.ok:
                self.error = self.result.trace.error or "the run failed"
        elif event.kind == "cancelled":
            self.phase = "cancelled"
        elif event.kind == "error":
            self.phase, self.error = "error", str(event.payload)

    @property
    def finished(self) -> bool:
        return self.phase in ("done", "cancelled", "error")

    def attempts_of(self, step: int) -> list[AttemptView]:
        return [v for (s, _), v in sorted(self.attempts.items()) if s == step]

    def step_title(self, index: int) -> str:
        step = self.plan.steps[index - 1] if self.plan and index <= len(self.plan.steps) else None
        record = self.steps.get(index)
        name = (record.step.step_name if record else None) or (step.step_name if step else None)
        return name or f"Step {index}"

    def gallery(self) -> list[tuple[str, str]]:
        """The run's result, each image once: the inputs, then each finished step's accepted image,
        as (file in the run folder, caption). Steps are added as they are accepted; once the run has
        finished, each step's image is the one its trace shows (``Trace.shown_image``: a repair's), followed
        by the original a repair replaced."""
        if self.run_dir is None:
            return []
        items: list[tuple[str, str]] = []
        inputs = self.result.trace.input_images if self.result is not None else []
        for number, name in enumerate(inputs, start=1):
            items.append((str(image_path(self.run_dir, name)), f"input {number} ({name})"))
        for index, record in sorted(self.steps.items()):
            shown = record.accepted_image
            if self.result is not None and index <= len(self.result.trace.steps):
                shown = self.result.trace.shown_image(index)
            path = image_path(self.run_dir, shown) if shown else None
            if path is None or not path.is_file():
                continue
            text = f": {record.text}" if record.text else ""
            caption = _clip(f"{index}. {self.step_title(index)}{text}")
            items.append((str(path), f"{caption} ({shown})"))
            original = record.accepted_image
            if original and original != shown and (before := image_path(self.run_dir, original)).is_file():
                items.append((str(before), f"{index}. before its repair ({original})"))  # beside the repair
        return items
