"""The opt-in loop features are shown (issue 45 item 3): with --candidates 3, --select-best critic and
--repair-budget 2, the console's step lines, index.html (also in Chromium), the demo, summary.json and
report.html say what was kept and discarded, the ranking, the review and the repaired step beside its
original; a failed ranking and a failed review are shown as failures."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from interleave_thinker import Pipeline
from interleave_thinker.cli.progress import RichObserver
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.runtime.opt_in import opt_in_counts, opt_in_line
from interleave_thinker.runtime.pipeline import Result
from interleave_thinker.runtime.reports import render_report, summarize
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from interleave_thinker.ui.live import RunView
from interleave_thinker.ui.render import render_final, render_live
from tests.helpers.browser import chromium
from tests.helpers.opt_in import LOOP, PLAN, REASON, SUCCESS
from tests.helpers.replies import scripted_config

FAILURE = [*SUCCESS[:2], "no ranking here", *SUCCESS[3:5], "no review either"]


def run(critic: list[str], out: Path, **extra: Any) -> tuple[Result, str]:
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


def test_the_console_step_lines_say_what_was_kept_discarded_and_selected(success: Any) -> None:
    _, printed, _ = success
    [first] = [line for line in printed.splitlines() if "step 1/2 done" in line]
    assert first.endswith(
        "; 3 candidates: 1 kept, 2 discarded; attempt 1 selected by the critic's ranking: "
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
    assert "attempt 1 selected by the critic&#39;s ranking" in page
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
    assert "selection by the critic's ranking failed, attempt 2 (the last) kept" in printed
    counts = opt_in_counts([result.trace])
    assert counts["selections"] == {"steps": 1, "by_critic": 1, "failed": 1, "succeeded": 0}
    assert counts["reviews"] == {"asked": 1, "failed": 1, "flagged_steps": 0, "succeeded": 0}
    assert "repairs" not in counts
    page = (tmp_path / "run" / "index.html").read_text(encoding="utf-8")
    assert "review failed, nothing repaired" in page and 'data-it="ranking-1"' not in page


def test_chromium_shows_the_ranking_the_review_and_the_repaired_step(success: Any) -> None:
    _, _, out = success
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 900, "height": 1200})
        page.goto((out / "index.html").as_uri())
        ranked = page.locator('[data-it="ranking-1"] img')
        assert ranked.count() == 3
        pair = page.locator('[data-it="repair-2"] img')
        assert pair.count() == 2
        for image in (*ranked.all(), *pair.all()):
            image.scroll_into_view_if_needed()
            assert image.evaluate("(img) => img.complete && img.naturalWidth > 0")
        repaired, original = (pair.nth(i).bounding_box() for i in (0, 1))
        assert repaired is not None and original is not None
        assert abs(repaired["y"] - original["y"]) < 1 and original["x"] > repaired["x"]  # side by side
        assert page.locator('[data-it="review"]').inner_text().startswith("Sequence review")
        page.screenshot(path=str(out / "opt-in.png"), full_page=True)
        assert (out / "opt-in.png").stat().st_size > 0
        json.loads((out / "trace.json").read_text(encoding="utf-8"))  # the page's trace is there
