"""The page's picture of a run in progress, updated event by event (no HTML here, see render.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from interleave_thinker.core.types import Attempt, Plan, StepRecord
from interleave_thinker.runtime.pipeline import Result
from interleave_thinker.ui.thumbs import data_uri
from interleave_thinker.ui.worker import Event


@dataclass
class AttemptView:
    step: int
    attempt: int
    prompt: str
    phase: str = "generating"  # generating -> reviewing -> done
    thumb: str | None = None  # data: URI of the attempt's image
    record: Attempt | None = None


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

    def attempts_of(self, step: int) -> list[AttemptView]:
        return [v for (s, _), v in sorted(self.attempts.items()) if s == step]
