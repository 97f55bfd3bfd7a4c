"""`eval report`: scored runs side by side, published numbers, paired galleries, checked in a real browser."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.report import write_report
from interleave_thinker.eval.report_data import load_runs, passed
from interleave_thinker.testing.doubles.judge import judge_server
from tests.conftest import shared_path

CHROMIUM = "/usr/bin/chromium"


def cli(*args: str) -> str:
    from interleave_thinker.cli.main import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def _scoring_folder(folder: Path, protocol: str, rows: list[dict[str, Any]], summary: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    judge = {"spec": "openai:x#m", "model": "m", "official": False, "note": "judge 'm' is not official"}
    full = {"protocol": protocol, "scorer_version": "current", "judge": judge, "outputs": "", **summary}
    (folder / "summary.json").write_text(json.dumps(full))
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_pass_rules_per_protocol() -> None:
    assert passed("wise", {"status": "ok", "score": 1.0}) and not passed(
        "wise", {"status": "ok", "score": 0.0}
    )
    assert passed("wise-legacy", {"status": "ok", "score": 0.8, "consistency": 2})
    assert not passed("wise-legacy", {"status": "ok", "score": 0.9, "consistency": 1})
    assert passed("rise", {"status": "ok", "accuracy": 1}) and not passed(
        "rise", {"status": "ok", "accuracy": 0}
    )
    assert passed("ueval", {"status": "ok", "score": 0.5}) and not passed(
        "ueval", {"status": "ok", "score": 0.4}
    )
    assert not passed("wise", {"status": "failed", "score": 1.0}) and not passed("wise", None)


def test_report_escapes_text_and_refuses_mixed_protocols(tmp_path: Path) -> None:
    evil = '<script>alert("x")</script>'
    rows_a = [{"id": "1", "category": "CULTURE", "score": 1.0, "status": "ok", "errors": []}]
    rows_b = [{"id": "1", "category": "CULTURE", "score": 0.0, "status": "failed", "errors": [evil]}]
    summary = {"overall": None, "categories": {"CULTURE": {"score": 1.0, "n": 1}}}
    a = _scoring_folder(tmp_path / "a", "wise", rows_a, summary)
    b = _scoring_folder(
        tmp_path / "b" / "s", "wise", rows_b, {**summary, "categories": {evil: {"score": 0.0}}}
    )
    markdown = write_report([a, b], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert evil not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert (
        page.count('class="pair"') == 1 and "incomplete" in page and "0.47" in page
    )  # published, for reference
    assert (
        "| Overall | incomplete (not all 1000 ids scored) | incomplete (not all 1000 ids scored) |"
        in markdown
    )
    assert "| CULTURE | 1.0000 (n=1) | – |" in markdown
    assert load_runs([tmp_path / "b"])[0].folder == b  # a generation folder with one scoring folder below
    c = _scoring_folder(tmp_path / "c", "rise", [], {"overall": {"accuracy": 0.1}})
    with pytest.raises(InputError, match="different protocols"):
        load_runs([a, c])
    with pytest.raises(InputError, match=r"no summary\.json"):
        load_runs([tmp_path / "nothing-here"])


def test_a_stand_in_judges_report_says_so_in_lines_of_at_most_200_characters(tmp_path: Path) -> None:
    from interleave_thinker.eval.scoring import STAND_IN, judge_metadata

    rows = [{"id": "1", "category": "CULTURE", "score": 1.0, "status": "ok", "errors": []}]
    summary = {"overall": 1.0, "categories": {"CULTURE": {"score": 1.0, "n": 1}}}
    folder = _scoring_folder(tmp_path / "s", "wise", rows, summary)
    full = json.loads((folder / "summary.json").read_text())
    judge = judge_metadata("Qwen3.5-35B-A3B", "tiny:judge", "tiny:judge")
    assert judge["stand_in"] is True and judge["note"] == STAND_IN
    (folder / "summary.json").write_text(json.dumps({**full, "judge": judge}))
    write_report([folder], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert 'class="notice"' in page and "these scores mean nothing" in page
    assert max(len(line) for line in page.splitlines()) <= 200
    served = judge_metadata("Qwen3.5-35B-A3B", "openai:http://h/v1#m", "m")
    assert "stand_in" not in served and served["note"] != STAND_IN


def _score(outputs: Path, data: Path, reply: str) -> Path:
    from interleave_thinker.eval.score_run import ScoreOptions, run_score

    with judge_server(lambda body: reply) as server:
        judge = f"openai:{server.url}#gpt-4.1-2025-04-14"
        run_score(ScoreOptions("rise", outputs, str(data), judge, outputs / "scores"))
    return outputs / "scores"


def _non_white_fraction(path: Path) -> float:
    with Image.open(path) as shot:
        pixels = list(shot.convert("L").resize((200, 200)).getdata())
    return sum(1 for p in pixels if p < 250) / len(pixels)


@pytest.mark.slow
def test_report_of_base_vs_agentic_tiny_runs_renders_in_a_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("chromium") is None and not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (make install installs it)")
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))
    data = shared_path("benchmarks", "risebench")
    for mode in ("base", "agentic"):
        cli("eval", "generate", "rise", "--data", str(data), "--out", str(tmp_path / mode), "--mode", mode,
            "--preset", "tiny", "--max-attempts", "2", "--quiet")  # fmt: skip
    base = _score(tmp_path / "base", data, "Final Score: 1")
    agentic = _score(tmp_path / "agentic", data, "Final Score: 5")
    page = tmp_path / "report" / "rise.html"
    markdown = cli("eval", "report", str(base), str(agentic), "--out", str(page))

    assert (
        "| category | base/scores (base, tiny:generator) | agentic/scores (agentic, tiny:generator) |"
        in markdown
    )
    # "Final Score: 1" fails the 1-5 judges (reasoning 1 halves the score, floored at 1) but passes the
    # logical 0/1 judges (1 or more -> 5): the official bookkeeping
    assert "| Temporal | 0.0% acc · 1.00 (n=1) | 100.0% acc · 5.00 (n=1) |" in markdown
    assert "| Logical | 100.0% acc · 5.00 (n=3) | 100.0% acc · 5.00 (n=3) |" in markdown
    assert "| Overall | 50.0% acc · 3.00 (n=6) | 100.0% acc · 5.00 (n=6) |" in markdown
    html = page.read_text()
    assert (
        html.count('class="pair"') == 3
        and 'data-id="logical_reasoning_3"' not in html
        and "28.9%" in html
        and "gpt-4.1-2025-04-14" in html
    )

    from playwright.sync_api import sync_playwright

    shot = tmp_path / "report.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            view = browser.new_page(viewport={"width": 1200, "height": 900})
            view.goto(page.resolve().as_uri())
            assert view.locator("#scores tr").count() == 1 + 4 + 1  # header, 4 categories, overall
            assert view.locator("#scores").is_visible()
            first = view.locator(".pair").first
            assert first.is_visible() and first.locator(".run").count() == 2
            widths = first.locator(".run > img").evaluate_all("imgs => imgs.map(i => i.naturalWidth)")
            assert len(widths) >= 2 and all(w == 64 for w in widths)  # every image of the row loaded
            first.locator("details").first.locator("summary").click()
            assert first.locator("details .attempt").first.is_visible()
            view.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    with Image.open(shot) as image:
        assert image.size[0] == 1200 and image.size[1] > 900
    assert _non_white_fraction(shot) > 0.01
