"""Parallel candidates (``loop.candidates``, runtime/candidates.py): rounds of attempts side by side,
the first accepted in seed order kept, whatever order the critic's answers arrive in.

The served tests run real HTTP servers on 127.0.0.1 (testing/doubles/seeded.py): the generator paints
the seed it was sent into its image and the critic judges by the seed it reads back, so a verdict
belongs to its attempt whenever it arrives; ``critic_delay`` makes later seeds answer first.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.cli.main import app
from interleave_thinker.cli.progress import attempt_line
from interleave_thinker.core.run_folder import read_trace
from interleave_thinker.core.types import Trace
from interleave_thinker.testing.doubles.counting import Counting
from interleave_thinker.testing.doubles.seeded import SeededWorld
from interleave_thinker.testing.doubles.server import LocalServer
from tests.helpers.release_loop import GOLDEN, THREE_STEPS, folder, release_request, scripted
from tests.helpers.replies import plan_reply, verdict

REPO = Path(__file__).resolve().parents[2]


# --- N=1 is the released loop, byte for byte -----------------------------------------------------------


def test_one_candidate_is_the_release_loop_byte_for_byte(tmp_path: Path) -> None:
    release_request(tmp_path / "unset")
    release_request(tmp_path / "one", candidates=1)
    unset, one = folder(tmp_path / "unset"), folder(tmp_path / "one")
    assert unset == one
    assert unset[0] == GOLDEN.read_text(encoding="utf-8")
    assert "candidates" not in json.loads(unset[0])["settings"]["loop"]
    assert sorted(unset[1]) == [
        f"step0{s}_attempt{a}.png"
        for s, a in ((1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))
    ]


# --- rounds, bounds and prompts, in process ------------------------------------------------------------


def test_max_attempts_bounds_the_rounds_and_the_step_s_last_attempt_is_forced() -> None:
    pipe, generator = scripted(
        [verdict(False, "better")], plan_reply(("Draw.", "p", None)), candidates=3, max_attempts=5
    )
    result = pipe("Draw something")
    assert [(c.prompt, c.seed) for c in generator.calls] == [
        ("p", 100), ("p", 101), ("p", 102), ("better", 103), ("better", 104),
    ]  # fmt: skip
    attempts = result.trace.steps[0].attempts
    assert [(a.attempt, a.accepted, a.forced, a.critic_called) for a in attempts] == [
        (0, False, False, True), (1, False, False, True), (2, False, False, True),
        (3, False, False, True), (4, True, True, False),
    ]  # fmt: skip
    assert result.trace.steps[0].accepted_image == "step01_attempt4.png"
    assert result.trace.settings["loop"]["candidates"] == 3  # type: ignore[index]


def test_the_generator_budget_bounds_a_request_s_calls_across_rounds() -> None:
    pipe, generator = scripted(
        [verdict(False, "again")], THREE_STEPS, candidates=3, generator_budget=4, critic_on_last_attempt=True
    )
    result = pipe("How to draw a cat?")
    assert [(c.prompt, c.seed) for c in generator.calls] == [
        ("a cat sketch", 100), ("a cat sketch", 101), ("a cat sketch", 102), ("again", 103),
    ]  # fmt: skip  # a round of 3 with one prompt, then the 1 call left
    assert result.trace.status == "failed" and "Step 2 got no generator call" in str(result.trace.error)
    step = result.trace.steps[0]
    assert [(a.accepted, a.forced) for a in step.attempts] == [(False, False)] * 3 + [(True, True)]


def test_local_backends_keep_the_first_accepted_and_the_later_ones_stay_as_attempts(tmp_path: Path) -> None:
    """A local (not cooperative) backend: the round's calls run one at a time; the outcome is the same,
    and the page and the progress lines say which attempts were not kept."""
    pipe, generator = scripted([verdict(True)], THREE_STEPS, candidates=3)
    result = pipe("How to draw a cat?", out_dir=tmp_path / "run")
    page = (tmp_path / "run" / "index.html").read_text(encoding="utf-8")
    assert (
        re.findall(r"seed 10\d · ([^<]*)", page) == ["accepted"] + ["not kept (an earlier candidate was)"] * 2
    )
    lines = [attempt_line(1, a).plain for a in result.trace.steps[0].attempts]
    assert [line.split(": ", 1)[1] for line in lines] == ["accepted by the critic"] + [
        "not kept: an earlier candidate of its round was"
    ] * 2
    assert [c.seed for c in generator.calls] == [s * 100 + a for s in (1, 2, 3) for a in range(3)]
    for number, step in enumerate(result.trace.steps, start=1):
        assert step.accepted_image == f"step{number:02d}_attempt0.png"
        assert [(a.accepted, a.forced, a.verdict is not None) for a in step.attempts] == [
            (True, False, True), (False, False, True), (False, False, False),  # the last: not judged
        ]  # fmt: skip
    assert generator.calls[3].image is not None  # step 2 edits step 1's kept image
    assert result.steps[0].image is not None and result.steps[0].image.tobytes() == (
        generator.calls[3].image.tobytes()
    )


# --- served: out of order, limits, kill and resume -----------------------------------------------------


def reversed_answers(seed: int) -> float:
    """Attempt 2 of a round answers first, attempt 0 last."""
    return 0.2 * (2 - seed % 100 % 3)


@pytest.fixture
def world() -> Iterator[tuple[SeededWorld, str]]:
    world = SeededWorld(accept=lambda seed, tag: seed % 100 in (1, 2), critic_delay=reversed_answers)
    with LocalServer(world) as server:
        yield world, server.url


def specs(chat: str, edit: str) -> dict[str, str]:
    return {
        "planner": f"openai:{chat}/v1#scripted",
        "critic": f"openai:{chat}/v1#scripted",
        "generator": f"http:{edit}",
    }


def served_settings(chat: str, edit: str, **loop: Any) -> dict[str, Any]:
    return {**specs(chat, edit), "loop": loop, "generation": {"width": 16, "height": 16, "steps": 1}}


def run_served(tmp_path: Path, how: str, settings: dict[str, Any], limits: tuple[str, ...] = ()) -> Trace:
    """One request, through the Python API (``run``'s path) or a one-request batch (the scheduler's)."""
    prompt = "Draw a fox"
    if how == "run":
        with Pipeline.from_config(PipelineConfig.resolve(preset="tiny", overrides=settings)) as pipe:
            return pipe(prompt).trace
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "fox", "prompt": prompt}) + "\n", encoding="utf-8")
    args = [
        "batch",
        "--input",
        str(tmp_path / "in.jsonl"),
        "--out",
        str(tmp_path / "out"),
        "--preset",
        "tiny",
    ]
    args += [
        "--config",
        str(config),
        "--quiet",
        *[a for limit in limits for a in ("--per-backend-limit", limit)],
    ]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    trace = read_trace(tmp_path / "out" / "requests" / "fox" / "trace.json")
    assert trace is not None
    return trace


@pytest.mark.parametrize("how", ["run", "batch"])
def test_the_first_accepted_in_seed_order_is_kept_when_later_seeds_answer_first(
    world: tuple[SeededWorld, str], tmp_path: Path, how: str
) -> None:
    double, url = world
    trace = run_served(tmp_path, how, served_settings(url, url, candidates=3, max_attempts=6))
    assert trace.status == "succeeded" and len(trace.steps) >= 2
    critic_seeds = [c["seed"] for c in double.calls("critic")]
    assert critic_seeds[:3] == [102, 101, 100]  # step 1's answers arrived in reverse seed order
    for number, step in enumerate(trace.steps, start=1):
        assert [(a.attempt, a.seed) for a in step.attempts] == [(i, number * 100 + i) for i in range(3)]
        assert [a.accepted for a in step.attempts] == [False, True, False]
        assert [a.verdict.success if a.verdict else None for a in step.attempts] == [False, True, True]
        assert step.accepted_image == f"step{number:02d}_attempt1.png"
    edits = [c for c in double.calls("generator", "start") if c["seed"] // 100 == 2]
    assert {c["source"] for c in edits} == {101}  # step 2 edits step 1's kept image, seed 101


def test_the_next_round_takes_the_refined_prompt_of_the_first_verdict_in_seed_order(tmp_path: Path) -> None:
    double = SeededWorld(accept=lambda seed, tag: seed % 100 >= 3, critic_delay=reversed_answers)
    with LocalServer(double) as server:
        trace = run_served(
            tmp_path, "run", served_settings(server.url, server.url, candidates=3, max_attempts=6)
        )
    step = trace.steps[0]
    planned = step.planned_prompt
    assert [c["seed"] for c in double.calls("critic")][:3] == [102, 101, 100]
    assert [a.prompt for a in step.attempts] == [planned] * 3 + [f"{planned} / fix 100"] * 3
    assert [a.accepted for a in step.attempts] == [False, False, False, True, False, False]
    assert step.accepted_image == "step01_attempt3.png"


@pytest.mark.parametrize(
    ("how", "limits", "peak"), [("batch", ("generator=2",), 2), ("batch", (), 3), ("run", (), 3)]
)
def test_calls_in_flight_at_the_generator_are_the_round_within_its_limit(
    tmp_path: Path, how: str, limits: tuple[str, ...], peak: int
) -> None:
    double = SeededWorld(accept=lambda seed, tag: True)
    counted = Counting(double, hold=0.25)
    with LocalServer(double) as chat, LocalServer(counted) as edit:
        trace = run_served(tmp_path, how, served_settings(chat.url, edit.url, candidates=3), limits)
    assert trace.status == "succeeded"
    assert counted.calls == 3 * len(trace.steps) and counted.peak == peak


@pytest.mark.slow
def test_kill_and_resume_with_three_candidates_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    double = SeededWorld(accept=lambda seed, tag: seed % 100 == 3, latency={"generator": 0.15})
    with LocalServer(double) as server:
        config = tmp_path / "settings.yaml"
        settings = served_settings(server.url, server.url, candidates=3, max_attempts=6)
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        command = [sys.executable, "-m", "interleave_thinker", "run", "Draw a fox", "--preset", "tiny"]
        command += ["--config", str(config), "--out"]
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        done = subprocess.run([*command, str(tmp_path / "whole")], env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr

        # Killed while step 2's first round is on the wire (step 1 made six calls), then resumed.
        mark = len(double.calls("generator", "start"))
        killed = subprocess.Popen([*command, str(tmp_path / "killed")], env=env, stderr=subprocess.DEVNULL)
        while len(double.calls("generator", "start")) - mark < 8 and killed.poll() is None:
            time.sleep(0.005)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        on_disk = read_trace(tmp_path / "killed" / "trace.json")
        assert on_disk is not None and [s.complete for s in on_disk.steps] == [True]
        mark = len(double.calls("generator", "start"))
        resumed = subprocess.run(
            [*command, str(tmp_path / "killed"), "--resume"], env=env, capture_output=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
    assert all(c["seed"] >= 200 for c in double.calls("generator", "start")[mark:])  # step 1 not redone
    whole, again = folder(tmp_path / "whole"), folder(tmp_path / "killed")
    assert again == whole
    trace = json.loads(whole[0])
    assert all(
        s["accepted_image"] == f"step{i:02d}_attempt3.png" for i, s in enumerate(trace["steps"], start=1)
    )
    assert len(whole[1]) == 6 * len(trace["steps"])
