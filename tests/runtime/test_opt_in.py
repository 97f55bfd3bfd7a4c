"""The opt-in loop features are shown (issue 45 item 3): with --candidates 3, --select-best critic and
--repair-budget 2, the console's step lines, index.html (also in Chromium), the demo, summary.json and
report.html say what was kept and discarded, the ranking, the review and the repaired step beside its
original; a failed ranking and a failed review are shown as failures. Once more through the command on the
tiny preset (the one docs/consistency.md names): every feature's success path with the real tiny models."""

from __future__ import annotations

import io
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from interleave_thinker import Pipeline
from interleave_thinker.cli import main
from interleave_thinker.cli.progress import RichObserver
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.run_folder import read_trace
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.opt_in import opt_in_counts, opt_in_line
from interleave_thinker.runtime.pipeline import Result
from interleave_thinker.runtime.reports import SUMMARY, render_report, summarize, write_reports
from interleave_thinker.runtime.selection import compared
from interleave_thinker.testing.scripted import Reply, ScriptedImageBackend, ScriptedVLMBackend
from interleave_thinker.ui.live import RunView
from interleave_thinker.ui.render import render_final, render_live
from tests.helpers.browser import chromium
from tests.helpers.opt_in import LOOP, PLAN, REASON, SUCCESS
from tests.helpers.replies import scripted_config

FAILURE: list[Reply] = [*SUCCESS[:2], "no ranking here", *SUCCESS[3:5], "no review either"]
TINY_REQUEST = "Show a cat from young to old."
"""A request the tiny planner plans in two image steps (the command of docs/consistency.md)."""
TINY_COMMAND = ["--candidates", "3", "--select-best", "critic", "--repair-budget", "2", "--preset", "tiny"]


def run(critic: list[Reply], out: Path, **extra: Any) -> tuple[Result, str]:
    """One request through the scripted loop with the three features on; its console output."""
    pipe = Pipeline(
        planner=ScriptedVLMBackend([PLAN]),
        critic=ScriptedVLMBackend(critic),
        generator=ScriptedImageBackend(),
        config=scripted_config(LOOP, **extra),
        templates=builtin_templates(),
    )
    console = Console(file=io.StringIO(), width=400, force_terminal=False)
    with RichObserver(console, candidates=3) as observer:
        result = pipe("A fox's day", out_dir=out, observer=observer)
    assert result.ok
    return result, console.file.getvalue()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def success(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, str, Path]:
    out = tmp_path_factory.mktemp("opt-in") / "run"
    result, printed = run(SUCCESS, out)
    return result, printed, out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, str, Path]:
    """``run TINY_REQUEST TINY_COMMAND`` (in this process: its console captured), then the summary.json
    ``batch`` writes for that trace. The tiny critic accepts the first two candidates of each round (the
    third is forced), so its ranking compares them; the tiny reviewer always flags one step."""
    root = tmp_path_factory.mktemp("opt-in-tiny")
    console = Console(file=io.StringIO(), width=400, force_terminal=False)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(main, "console", console)
        args = ["run", TINY_REQUEST, *TINY_COMMAND, "--out", str(root / "run")]
        done = CliRunner().invoke(main.app, args)
    signal.signal(signal.SIGTERM, handler)  # `run` installs its own
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert done.exit_code == 0, done.output + printed
    trace = read_trace(root / "run" / "trace.json")
    assert trace is not None
    write_reports(root, {"tiny": trace})
    return trace, printed, root


def test_the_console_step_lines_say_what_was_kept_discarded_and_selected(success: Any) -> None:
    _, printed, _ = success
    [first] = [line for line in printed.splitlines() if "step 1/2 done" in line]
    assert first.endswith(
        "; 3 candidates: 1 kept, 2 discarded; step01_attempt1.png selected by the critic's ranking: "
        "ranked first of 3 (ranking [2, 1, 3]): the second is sharpest"
    )
    [second] = [line for line in printed.splitlines() if "step 2/2 done" in line]
    assert second.endswith("; 3 candidates: 1 kept, 2 discarded")


def test_summary_and_report_count_the_features(success: Any) -> None:
    result, _, _ = success
    summary = summarize({"r1": result.trace})
    assert summary["opt_in"] == {
        "candidates": {"steps": 2, "kept": 2, "discarded": 4},
        "selections": {"steps": 1, "by_critic": 1, "failed": 0, "succeeded": 1},
        "reviews": {"asked": 1, "failed": 0, "flagged_steps": 1, "succeeded": 1},
        "repairs": {"steps": 1, "repaired": 1, "kept_original": 0, "calls": 1},
    }
    line = opt_in_line(summary["opt_in"])
    assert line == (
        "opt-in features: candidates: 2 kept, 4 discarded in 2 step(s); selections: 1 made, 0 failed; "
        "reviews: 1 usable (1 step(s) flagged), 0 failed; repairs: 1 of 1 step(s) repaired in 1 call(s)"
    )
    assert render_report({"r1": result.trace}, summary).count(line) == 2  # the batch's line and the card's


def test_index_html_shows_the_ranking_the_review_and_the_repair_beside_the_original(success: Any) -> None:
    _, _, out = success
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "step01_attempt1.png selected by the critic&#39;s ranking" in page
    ranking = page.split('data-it="ranking-1"', 1)[1].split("</ol>", 1)[0]
    assert [part.split('"', 1)[0] for part in ranking.split('src="images/')[1:]] == [
        "step01_attempt1.png",
        "step01_attempt0.png",
        "step01_attempt2.png",
    ]
    repair = page.split('data-it="repair-2"', 1)[1].split("</div>", 1)[0]
    assert 'src="images/step02_repair0.png"' in repair and 'src="images/step02_attempt0.png"' in repair
    assert f"review flagged 1 step(s): step 2: {REASON}" in page


def test_the_demo_shows_the_ranking_and_the_repair(success: Any) -> None:
    result, _, out = success
    view = RunView(phase="done", plan=result.trace.planner.plan, run_dir=out, result=result)
    view.steps = dict(enumerate(result.trace.steps, start=1))
    live = render_live(view)
    assert 'data-ev="ranking-1">ranking, best first: attempt 1, attempt 0, attempt 2' in live
    final = render_final(view)
    assert "step 2 repaired: step02_repair0.png shown in place of step02_attempt0.png" in final
    captions = [caption for _, caption in view.gallery()]
    assert captions[-2:] == [
        "2. S2: It sleeps. (step02_repair0.png)",
        "2. before its repair (step02_attempt0.png)",
    ]


def test_a_failed_ranking_and_a_failed_review_are_shown_as_failures(tmp_path: Path) -> None:
    result, printed = run(FAILURE, tmp_path / "run", agents={"max_parse_attempts": 1})
    assert "selection by the critic's ranking failed, step01_attempt2.png (the last) kept" in printed
    counts = opt_in_counts([result.trace])
    assert counts["selections"] == {"steps": 1, "by_critic": 1, "failed": 1, "succeeded": 0}
    assert counts["reviews"] == {"asked": 1, "failed": 1, "flagged_steps": 0, "succeeded": 0}
    assert "repairs" not in counts
    page = (tmp_path / "run" / "index.html").read_text(encoding="utf-8")
    assert "review failed, nothing repaired" in page and 'data-it="ranking-1"' not in page


def test_chromium_shows_the_ranking_the_review_and_the_repaired_step(
    success: Any, tiny: Any, tmp_path: Path
) -> None:
    """The scripted run's page, then the tiny preset's (its screenshot kept in ``tmp_path``)."""
    _, _, out = success
    trace, _, root = tiny
    [repair] = trace.repair.steps
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 900, "height": 1200})
        for folder, ranked_at, repaired_at, shot in (
            (out, {1: 3}, 2, out / "opt-in.png"),
            (root / "run", {1: 2, 2: 2}, repair.step_number, tmp_path / "opt-in-tiny.png"),
        ):
            page.goto((folder / "index.html").as_uri())
            images = []
            for number, count in ranked_at.items():
                ranked = page.locator(f'[data-it="ranking-{number}"] img')
                assert ranked.count() == count
                images += ranked.all()
            pair = page.locator(f'[data-it="repair-{repaired_at}"] img')
            assert pair.count() == 2
            for image in (*images, *pair.all()):
                image.scroll_into_view_if_needed()
                assert image.evaluate("(img) => img.complete && img.naturalWidth > 0")
            repaired, original = (pair.nth(i).bounding_box() for i in (0, 1))
            assert repaired is not None and original is not None
            assert abs(repaired["y"] - original["y"]) < 1 and original["x"] > repaired["x"]  # side by side
            assert page.locator('[data-it="review"]').inner_text().startswith("Sequence review")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 0
            json.loads((folder / "trace.json").read_text(encoding="utf-8"))  # the page's trace is there


def test_the_tiny_preset_shows_each_features_success_path_in_the_console(tiny: Any) -> None:
    trace, printed, _ = tiny
    image_steps = [s for s in trace.steps if s.kind == "image"]
    assert len(image_steps) == 2 and trace.status == "succeeded"
    for number, step in enumerate(trace.steps, start=1):
        # the critic accepted two candidates of the round, the third was made and not kept
        assert [a.verdict.success if a.verdict else None for a in step.attempts] == [True, True, None]
        chosen = step.selected
        assert chosen is not None and chosen.by == "critic" and chosen.error is None
        kept = step.accepted_attempt
        assert kept is not None and kept.attempt == chosen.attempt and not kept.forced
        assert [a.attempt for a in compared(step)] == [0, 1]
        order = re.fullmatch(
            r"ranked first of 2 accepted \(ranking \[([12]), ([12])\]\): picked by a stand-in model",
            chosen.reason,
        )
        assert (
            order is not None and {order[1], order[2]} == {"1", "2"} and int(order[1]) - 1 == chosen.attempt
        )
        states = [
            ln.split(": ", 1)[1] for ln in printed.splitlines() if ln.startswith(f"  step {number} attempt ")
        ]
        assert states == [
            "accepted by the critic",
            "accepted by the critic; the step's accepted candidates are compared",
            "not kept: an earlier candidate of its round was",
        ]
        [line] = [ln for ln in printed.splitlines() if f"step {number}/2 done" in ln]
        assert line.endswith(
            f"; 3 candidates: 1 kept, 2 discarded; step{number:02d}_attempt{chosen.attempt}.png selected by the critic's ranking: "
            f"{chosen.reason}"
        )
    assert trace.repair is not None and trace.repair.flagged is not None
    [flag] = trace.repair.flagged
    [repair] = trace.repair.steps
    assert repair.step_number == flag.step and repair.repaired_image == f"step{flag.step:02d}_repair0.png"
    original = repair.original_image
    assert f"  review flagged 1 step(s): step {flag.step}: named by a stand-in model" in printed
    shown = f"  step {flag.step} repaired: {repair.repaired_image} shown in place of {original} (1 repair call(s))"
    assert shown in printed.splitlines()


def test_the_tiny_preset_counts_them_in_summary_json_and_shows_them_in_index_html(tiny: Any) -> None:
    trace, _, root = tiny
    summary = json.loads((root / SUMMARY).read_text(encoding="utf-8"))
    assert summary["opt_in"] == {
        "candidates": {"steps": 2, "kept": 2, "discarded": 4},
        "selections": {"steps": 2, "by_critic": 2, "failed": 0, "succeeded": 2},
        "reviews": {"asked": 1, "failed": 0, "flagged_steps": 1, "succeeded": 1},
        "repairs": {"steps": 1, "repaired": 1, "kept_original": 0, "calls": 1},
    }
    page = (root / "run" / "index.html").read_text(encoding="utf-8")
    for number, step in enumerate(trace.steps, start=1):
        assert step.selected is not None
        ranking = page.split(f'data-it="ranking-{number}"', 1)[1].split("</ol>", 1)[0]
        best, other = step.selected.attempt, 1 - step.selected.attempt  # the two accepted, best first
        assert [p.split('"', 1)[0] for p in ranking.split('src="images/')[1:]] == [
            f"step{number:02d}_attempt{best}.png",
            f"step{number:02d}_attempt{other}.png",
        ]
    assert page.count("accepted, not kept (ranked lower)") == 2  # the other accepted candidate of each step
    [repair] = trace.repair.steps
    pair = page.split(f'data-it="repair-{repair.step_number}"', 1)[1].split("</div>", 1)[0]
    assert f'src="images/{repair.repaired_image}"' in pair and f'src="images/{repair.original_image}"' in pair
    assert "review flagged 1 step(s)" in page and "tiny stand-in models" in page
