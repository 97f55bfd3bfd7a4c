"""A tiny-model build in its pinned child reports its steps to the display, which shows them as lines
off a terminal (a log, CI) and keeps a failing child's last output for the error."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from interleave_thinker.cli.progress import LoadingDisplay
from interleave_thinker.core.build_progress import BuildReporter, current_reporter, reporting_builds
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.tiny.pinned import PROGRESS_PREFIX, parse_progress, run_pinned

CHILD = (
    "import os\n"
    "print('loading the recipe')\n"
    "for step in range(1, 21): print(f'{prefix}{step} 20', flush=True)\n"
    "print('threads', os.environ['OMP_NUM_THREADS'])\n"
)


class Recorder(BuildReporter):
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def start(self, what: str) -> None:
        self.events.append(("start", what))

    def step(self, what: str, done: int, total: int) -> None:
        self.events.append(("step", what, str(done), str(total)))

    def end(self, what: str) -> None:
        self.events.append(("end", what))


def child(code: str) -> list[str]:
    return ["-c", f"prefix = {PROGRESS_PREFIX!r}\n{code}"]


def test_progress_lines_are_parsed_and_nothing_else_is() -> None:
    assert parse_progress(f"{PROGRESS_PREFIX}3 160\n") == (3, 160)
    assert parse_progress(f" 33%|███▎      | 1/3 [00:00<00:01]{PROGRESS_PREFIX}1 3\n") == (
        1,
        3,
    )  # after a bar
    assert parse_progress(f"{PROGRESS_PREFIX}three 160") is None
    assert parse_progress("{'loss': 1.2}") is None


def test_the_reporter_gets_every_step_of_the_child_in_order() -> None:
    recorder = Recorder()
    with reporting_builds(recorder):
        assert current_reporter() is recorder
        run_pinned(child(CHILD), "the tiny thing")
    assert current_reporter() is None
    steps = [int(e[2]) for e in recorder.events if e[0] == "step"]
    assert steps == list(range(1, 21))
    assert recorder.events[0] == ("start", "the tiny thing") and recorder.events[-1] == (
        "end",
        "the tiny thing",
    )


def test_a_failing_child_names_the_build_and_shows_its_last_lines_without_progress() -> None:
    recorder = Recorder()
    with reporting_builds(recorder), pytest.raises(InterleaveThinkerError) as caught:
        run_pinned(child(CHILD + "raise SystemExit('no more memory')\n"), "the tiny thing")
    message = str(caught.value)
    assert "Building the tiny thing failed (exit 1)" in message
    assert "no more memory" in message and "threads 2" in message  # the pinned thread count
    assert PROGRESS_PREFIX not in message
    assert recorder.events[-1] == ("end", "the tiny thing")


def test_off_a_terminal_the_loading_display_prints_each_phase_and_every_tenth_of_a_build() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, color_system=None, width=200)
    with LoadingDisplay(console, "loading models (tiny preset)"):
        run_pinned(child(CHILD), "the tiny thing")
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "loading models (tiny preset)…"
    assert lines[1] == "building the tiny thing (once; cached after)…"
    shown = [
        int(m.group(1)) for line in lines if (m := re.match(r"building the tiny thing: (\d+)/20 steps", line))
    ]
    assert shown == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert re.fullmatch(r"built the tiny thing in \d+\.\d s", lines[-2])
    assert re.fullmatch(r"loading models \(tiny preset\): done in \d+\.\d s", lines[-1])
    assert current_reporter() is None
