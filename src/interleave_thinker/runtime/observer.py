"""Hooks for progress displays; the loop calls them, the CLI renders them."""

from __future__ import annotations

from interleave_thinker.core.types import Attempt, Plan, StepRecord


class Observer:
    """No-op base: override what you want to show."""

    def on_planning(self) -> None: ...

    def on_plan(self, plan: Plan) -> None: ...

    def on_attempt_start(self, step_index: int, attempt: int, prompt: str) -> None: ...

    def on_attempt_end(self, step_index: int, attempt: Attempt) -> None: ...

    def on_step_end(self, step_index: int, record: StepRecord) -> None: ...
