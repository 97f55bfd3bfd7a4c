"""What `interleave-thinker run` shows in a terminal: model text printed literally (rich markup never eats
``[image]`` or a reply's ``[bold]``), a planning phase without a made-up step total, attempts from 1."""

from __future__ import annotations

import io
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from interleave_thinker.agents.critic import format_verdict
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.backends import specs
from interleave_thinker.cli import main
from interleave_thinker.cli.progress import RichObserver
from interleave_thinker.core.types import Attempt, Plan, PlanStep, Verdict
from interleave_thinker.testing.scripted import Reply, ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.opt_in import PLAN as FOX_PLAN
from tests.helpers.opt_in import SUCCESS

MARKUP = "[bold]x[/bold]"
PLAN = format_plan(
    Plan(
        steps=[
            PlanStep(step_number=1, step_name="Sketch", instruction="Draw.", prompt=f"a cat {MARKUP}"),
            PlanStep(step_number=2, step_name="Colour [red]it[/red]", instruction="Colour.", prompt="orange"),
        ],
        reasoning="two steps",
    )
)
REJECT = format_verdict(Verdict(success=False, refine_prompt="a cat, sharper", reasoning="blurry"))
ACCEPT = format_verdict(Verdict(success=True, refine_prompt="", reasoning="fine"))
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def terminal() -> tuple[Console, io.StringIO]:
    """A console that believes it is a terminal, so the live progress bar renders into the buffer."""
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, color_system=None, width=160), buffer


def screen(buffer: io.StringIO) -> str:
    return CONTROL.sub("\n", buffer.getvalue())


@pytest.fixture
def scripted_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``scripted:planner`` / ``scripted:critic`` / ``scripted:generator`` for the command line, this test only."""
    replies = {"planner": [PLAN], "critic": [REJECT, ACCEPT, ACCEPT]}

    def vlm(spec: Any, options: Any, role: str) -> ScriptedVLMBackend:
        return ScriptedVLMBackend(list(replies[spec.target]), name=spec.raw)

    monkeypatch.setitem(specs.VLM_BACKENDS, "scripted", vlm)
    monkeypatch.setitem(specs.IMAGE_BACKENDS, "scripted", lambda spec, options: ScriptedImageBackend())
    monkeypatch.setattr(
        main, "quiet_diffusers", lambda generator: None
    )  # nothing of diffusers is loaded here
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)  # `run` installs its own


def test_run_prints_model_text_literally_and_no_unknown_total(
    scripted_kind: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    console, buffer = terminal()
    monkeypatch.setattr(main, "console", console)
    flags = [
        "--planner",
        "scripted:planner",
        "--critic",
        "scripted:critic",
        "--generator",
        "scripted:generator",
    ]
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main.app, ["run", "Draw a cat", "--preset", "tiny", *flags, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output + screen(buffer)
    shown = screen(buffer)
    assert f"  1. [image] Sketch: a cat {MARKUP}" in shown
    assert "  2. [image] Colour [red]it[/red]: orange" in shown
    assert "step 1 attempt 1 (seed 100): rejected; retrying with a refined prompt" in shown
    assert "step 1 attempt 2 (seed 101): accepted by the critic" in shown
    assert "step 2 attempt 1 (seed 200): accepted by the critic" in shown
    assert "attempt 0" not in shown and "None" not in shown
    assert re.search(r"starting the run|planning: the planner is thinking", shown)  # the bar before the plan
    assert "/2 steps" in shown  # and the step count once the plan exists
    assert (out / "index.html").is_file()


def test_the_step_count_appears_only_once_there_is_a_plan() -> None:
    console, buffer = terminal()
    with RichObserver(console) as observer:
        observer.on_planning()
        console.print(observer.progress.make_tasks_table(observer.progress.tasks))
        observer.on_plan(Plan(steps=[PlanStep(step_number=1, prompt="p")], reasoning=""))
        console.print(observer.progress.make_tasks_table(observer.progress.tasks))
    planning, planned = screen(buffer).split("Plan: 1 step(s)")
    assert "planning: the planner is thinking" in planning and "steps" not in planning
    assert "0/1 steps" in planned


def test_errors_and_generation_failures_print_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    console, buffer = terminal()
    monkeypatch.setattr(main, "console", console)
    main.print_error(f"Input image a{MARKUP}.png does not exist.")
    observer = RichObserver(console)
    failed = Attempt(
        step_number=1,
        attempt=0,
        prompt="p",
        seed=100,
        before_image="white-canvas",
        generation_error=f"server said {MARKUP}",
    )
    observer.on_attempt_end(1, failed)
    shown = screen(buffer)
    assert f"error: Input image a{MARKUP}.png does not exist." in shown
    assert f"step 1 attempt 1 (seed 100): generation failed: server said {MARKUP}" in shown


def test_user_paths_print_literally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path holding ``[x]`` is shown as typed, not read as a rich style tag (`reward` on no rollouts)."""
    from interleave_thinker.cli import scoring

    buffer = io.StringIO()
    monkeypatch.setattr(scoring, "console", Console(file=buffer, color_system=None, width=1000))
    rollouts = tmp_path / "runs[x]" / "rollouts [bold].jsonl"
    rollouts.parent.mkdir()
    rollouts.write_text("\n")
    flags = ["--generator", "tiny:generator", "--judge", "tiny:judge", "--out", str(tmp_path / "o.jsonl")]
    result = CliRunner().invoke(main.app, ["reward", "--input", str(rollouts), *flags])
    assert result.exit_code == 1, result.output
    assert buffer.getvalue() == f"error: {rollouts} holds no rollouts; nothing to score.\n"


def test_run_says_what_the_opt_in_features_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--candidates 3 --select-best critic --repair-budget 2: each step's line counts its candidates and
    names the selection; the review and the repair are printed after the last step (issue 45 item 3)."""
    replies: dict[str, list[Reply]] = {"planner": [FOX_PLAN], "critic": SUCCESS}
    monkeypatch.setitem(
        specs.VLM_BACKENDS,
        "scripted",
        lambda spec, options, role: ScriptedVLMBackend(list(replies[spec.target]), name=spec.raw),
    )
    monkeypatch.setitem(specs.IMAGE_BACKENDS, "scripted", lambda spec, options: ScriptedImageBackend())
    monkeypatch.setattr(main, "quiet_diffusers", lambda generator: None)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # `run` installs a SIGTERM handler
    console, buffer = terminal()
    monkeypatch.setattr(main, "console", console)
    backends = ["--planner", "scripted:planner", "--critic", "scripted:critic", "--generator", "scripted:g"]
    features = ["--candidates", "3", "--select-best", "critic", "--repair-budget", "2"]
    args = ["run", "A fox's day", "--preset", "tiny", *backends, *features, "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(main.app, args)
    assert result.exit_code == 0, result.output + screen(buffer)
    shown = screen(buffer)
    assert (
        "; 3 candidates: 1 kept, 2 discarded; step01_attempt1.png selected by the critic's ranking" in shown
    )
    assert "  review flagged 1 step(s): step 2: the fox turned grey" in shown
    assert "  step 2 repaired: step02_repair0.png shown in place of step02_attempt0.png" in shown
