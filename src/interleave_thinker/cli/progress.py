"""A live terminal display of plan, steps and attempts (rich), fed by the loop's observer hooks.

Model and user text (step names, prompts, errors) is printed as :class:`rich.text.Text`, never as markup:
rich would take a plan's ``[image]`` label or a reply's ``[bold]`` for a style tag and swallow it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text

from interleave_thinker.core.build_progress import BuildReporter, reporting_builds
from interleave_thinker.core.config import LoopOptions
from interleave_thinker.core.types import Attempt, Plan, StepRecord
from interleave_thinker.runtime.failures import one_line
from interleave_thinker.runtime.observer import Observer
from interleave_thinker.runtime.opt_in import step_note

SHOWN_CHARS = 200
"""Longest model text one terminal line shows (the trace and the page keep all of it)."""


BAR_WIDTH = 20
"""Columns of the bar itself: with the figures (``500/1000 0:01:02 0:03:04``) it fits 80 columns."""


def label_column(label: str = "{task.description}", *, markup: bool = True) -> TextColumn:
    """A bar's label that wraps onto a second line when the terminal is narrow, so the figures after it
    are never cut (rich shrinks every column of a too-wide row otherwise, ``500/10…``)."""
    return TextColumn(label, markup=markup, table_column=Column(no_wrap=False, ratio=1))


def counter_bar(console: Console, label: str = "{task.description}", *, quiet: bool = False) -> Progress:
    """The bar of the commands that work through many things (requests, items, rollouts, attempts)."""
    return Progress(
        *(label_column(label), BarColumn(bar_width=BAR_WIDTH), MofNCompleteColumn()),
        *(TimeElapsedColumn(), TimeRemainingColumn()),
        console=console,
        disable=quiet,
    )


class StepsColumn(ProgressColumn):
    """``N/M steps`` once the plan exists; nothing while planning (the bar pulses, the label says why)."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        return Text(f"{int(task.completed)}/{int(task.total)} steps")


def shown(text: str | None) -> str:
    """Model text for one terminal line: cleaned, on one line, bounded."""
    return one_line(text or "", SHOWN_CHARS)


def plan_lines(plan: Plan) -> list[Text]:
    """The plan as printed: a header, then ``N. [image|text] name: prompt`` per step, all literal."""
    label = " (single-step fallback)" if plan.fallback else ""
    lines = [Text.assemble(("Plan", "bold"), f"{label}: {len(plan.steps)} step(s)")]
    for step in plan.steps:
        kind = "text" if step.is_text_answer else "image"
        what = step.generation_prompt or step.auxiliary_text
        lines.append(Text(f"  {step.step_number}. [{kind}] {shown(step.step_name)}: {shown(what)}"))
    return lines


def attempt_line(step_index: int, attempt: Attempt, *, compared: bool = False) -> Text:
    """One finished attempt, numbered from 1 as people count (the trace keeps 0-based ``attempt``).
    ``compared``: ``loop.select_best`` is on, so a round's accepted candidates are compared after the round
    (the step's line says which is kept), not decided by seed here."""
    if attempt.generation_error:
        state: tuple[str, str] = ("generation failed", "red")
        detail = f": {shown(attempt.generation_error)}"
    elif attempt.forced:
        state, detail = ("accepted (last attempt, no critic call)", "yellow"), ""
    elif compared and not attempt.accepted and attempt.verdict and attempt.verdict.success:
        state, detail = ("accepted by the critic", "green"), "; the step's accepted candidates are compared"
    elif not attempt.accepted and (
        not attempt.critic_called or (attempt.verdict and attempt.verdict.success)
    ):
        state, detail = ("not kept: an earlier candidate of its round was", "dim"), ""  # loop.candidates
    elif attempt.verdict is None:
        state, detail = ("critic gave no valid verdict", "red"), f" ({len(attempt.critic_raw)} replies)"
    elif attempt.accepted:
        state, detail = ("accepted by the critic", "green"), ""
    else:
        state, detail = ("rejected", "yellow"), "; retrying with a refined prompt"
    head = f"  step {step_index} attempt {attempt.attempt + 1} (seed {attempt.seed}): "
    return Text.assemble(head, state, detail)


def phase_bar(console: Console, *extra: ProgressColumn, quiet: bool = False) -> Progress:
    """A live bar for one phase, drawn on a terminal only and not when ``quiet`` (the phase lines say it all)."""
    return Progress(
        *(SpinnerColumn(), label_column(markup=False), BarColumn(bar_width=BAR_WIDTH), StepsColumn()),
        *(TimeElapsedColumn(), *extra),
        console=console,
        transient=True,
        disable=quiet or not console.is_terminal,
    )


def elapsed_since(start: float) -> str:
    return f"{time.monotonic() - start:.1f} s"


@contextlib.contextmanager
def phase(console: Console, text: str, *, quiet: bool = False) -> Iterator[None]:
    """``text ...`` when a phase starts and ``text: 3.2 s`` when it ends (nothing more if it fails: the
    error says why). Why: no command may sit silent for seconds (imports, model loads, dataset building)
    with nothing on the screen, and a log should say what took the time."""
    start = time.monotonic()
    if not quiet:
        console.print(Text(f"{text} ..."), soft_wrap=True)
    yield
    if not quiet:
        console.print(Text(f"{text}: {elapsed_since(start)}"), soft_wrap=True)


class LoadingDisplay(BuildReporter):
    """A one-off phase (loading models, one judgement): a spinner with the elapsed time, a bar with steps
    and time left for each tiny model built on the way (format training takes minutes), and a line with
    the time each part took. Every command that loads models shows its loading through this.

    Why lines as well as bars: a bar is drawn only on a terminal, and a log or CI output should still say
    what took the time. Off a terminal (or ``quiet``: no bars), a build prints its steps every tenth of
    the way instead.
    """

    def __init__(self, console: Console, label: str, *, quiet: bool = False) -> None:
        self.console, self.label = console, label
        self.lines = quiet or not console.is_terminal
        """Print the progress as lines: no bar is drawn."""
        self.progress = phase_bar(console, TimeRemainingColumn(), quiet=quiet)
        self.started: dict[str, tuple[float, TaskID, int]] = {}
        self.reporting = reporting_builds(self)

    def __enter__(self) -> LoadingDisplay:
        self.start_time = time.monotonic()
        if self.lines:
            self.console.print(Text(f"{self.label}…"))
        self.progress.add_task(self.label, total=None)
        self.progress.start()
        self.reporting.__enter__()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.reporting.__exit__(None, None, None)
        self.progress.stop()
        if exc_type is None:
            self.console.print(Text(f"{self.label}: done in {elapsed_since(self.start_time)}"))

    def start(self, what: str) -> None:
        task = self.progress.add_task(f"building {what} (once; cached after)", total=None)
        self.started[what] = (time.monotonic(), task, 0)
        if self.lines:
            self.console.print(Text(f"building {what} (once; cached after)…"))

    def step(self, what: str, done: int, total: int) -> None:
        start, task, shown_tenth = self.started[what]
        self.progress.update(task, total=total, completed=done)
        tenth = done * 10 // max(total, 1)
        if self.lines and tenth > shown_tenth:
            self.console.print(Text(f"building {what}: {done}/{total} steps, {elapsed_since(start)}"))
            self.started[what] = (start, task, tenth)

    def end(self, what: str) -> None:
        start, task, _ = self.started.pop(what)
        self.progress.remove_task(task)
        self.console.print(Text(f"built {what} in {elapsed_since(start)}"))


class RichObserver(Observer):
    """One bar for the run: a pulsing bar and the phase while planning, then ``N/M steps``; a line with
    the time taken when planning and each step end (also off a terminal, where no bar is drawn); a step's
    line also says what the opt-in features did (candidates kept and discarded, the selection)."""

    def __init__(self, console: Console, candidates: int = 1, *, compared: bool = False) -> None:
        self.console = console
        self.candidates = candidates
        """``loop.candidates``: above 1, each step's line counts its candidates kept and discarded."""
        self.compared = compared
        """``loop.select_best`` is on: a round's accepted candidates are compared after it."""
        self.progress = phase_bar(console)
        self.task = self.progress.add_task("starting the run", total=None)
        self.phase_start = time.monotonic()
        self.steps = 0

    @classmethod
    def for_loop(cls, console: Console, loop: LoopOptions) -> RichObserver:
        """The display of a run with the loop settings ``loop`` (its candidates, whether they are compared)."""
        return cls(console, loop.candidates, compared=loop.select_best != "off")

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def on_planning(self) -> None:
        self.phase_start = time.monotonic()
        self.progress.update(self.task, description="planning: the planner is thinking")
        if not self.console.is_terminal:
            self.console.print(Text("planning: the planner is thinking…"))

    def on_plan(self, plan: Plan) -> None:
        self.console.print(Text(f"planned in {elapsed_since(self.phase_start)}"))
        self.phase_start, self.steps = time.monotonic(), len(plan.steps)
        for line in plan_lines(plan):
            self.console.print(line)
        self.progress.update(self.task, total=len(plan.steps), completed=0, description="plan ready")

    def on_attempt_start(self, step_index: int, attempt: int, prompt: str) -> None:
        self.progress.update(self.task, description=f"step {step_index} attempt {attempt + 1}: generating")

    def on_attempt_end(self, step_index: int, attempt: Attempt) -> None:
        self.console.print(attempt_line(step_index, attempt, compared=self.compared))

    def on_step_end(self, step_index: int, record: StepRecord) -> None:
        self.progress.update(self.task, advance=1, description=f"step {step_index} done")
        of = f"/{self.steps}" if self.steps else ""  # a resumed run may not announce its plan again
        note = step_note(record, self.candidates)
        extra = f"; {note}" if note else ""
        self.console.print(Text(f"  step {step_index}{of} done in {elapsed_since(self.phase_start)}{extra}"))
        self.phase_start = time.monotonic()
