"""A live terminal display of plan, steps and attempts (rich), fed by the loop's observer hooks."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from interleave_thinker.core.types import Attempt, Plan, StepRecord
from interleave_thinker.runtime.observer import Observer


def counter_bar(console: Console, label: str = "{task.description}", *, quiet: bool = False) -> Progress:
    """The bar of the commands that work through many things (requests, items, rollouts, attempts)."""
    return Progress(
        *(TextColumn(label), BarColumn(), MofNCompleteColumn()),
        *(TimeElapsedColumn(), TimeRemainingColumn()),
        console=console,
        disable=quiet,
    )


class RichObserver(Observer):
    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} steps"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("planning", total=None)

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def on_planning(self) -> None:
        self.progress.update(self.task, description="[bold]planner[/] thinking")

    def on_plan(self, plan: Plan) -> None:
        label = " (single-step fallback)" if plan.fallback else ""
        self.console.print(f"[bold]Plan[/]{label}: {len(plan.steps)} step(s)")
        for step in plan.steps:
            kind = "text" if step.is_text_answer else "image"
            self.console.print(
                f"  {step.step_number}. [{kind}] {step.step_name or ''}: {step.generation_prompt or step.auxiliary_text or ''}"
            )
        self.progress.update(self.task, total=len(plan.steps), completed=0)

    def on_attempt_start(self, step_index: int, attempt: int, prompt: str) -> None:
        self.progress.update(self.task, description=f"step {step_index} attempt {attempt + 1}: generating")

    def on_attempt_end(self, step_index: int, attempt: Attempt) -> None:
        if attempt.generation_error:
            state = f"[red]generation failed[/]: {attempt.generation_error}"
        elif attempt.forced:
            state = "[yellow]accepted (last attempt, no critic call)[/]"
        elif attempt.verdict is None:
            state = f"[red]critic gave no valid verdict[/] ({len(attempt.critic_raw)} replies)"
        elif attempt.accepted:
            state = "[green]accepted by the critic[/]"
        else:
            state = "[yellow]rejected[/]; retrying with a refined prompt"
        self.console.print(
            f"  step {step_index} attempt {attempt.attempt + 1} (seed {attempt.seed}): {state}"
        )

    def on_step_end(self, step_index: int, record: StepRecord) -> None:
        self.progress.update(self.task, advance=1, description=f"step {step_index} done")
