"""`eval calibrate opening`: the published agreement of IntJudge (82.42%) and GPT-4o (71.08%) with people,
reproduced from OpenING's stored verdicts (../shared), printed and written; the four rules on known pairs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.calibration import opening
from tests.conftest import shared_path


def test_published_agreement_reproduced_printed_and_written(tmp_path: Path) -> None:
    data = shared_path("reference", "calibration", "opening")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["eval", "calibrate", "opening", "--data", str(data), "--out", str(out)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert "FDT (force-dividing ties)    82.42%  3545/4301 pairs  (published 82.42%)" in result.output
    assert "FDT (force-dividing ties)    71.08%  3058/4302 pairs  (published 71.08%)" in result.output
    record = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    assert record["human"] == {
        "file": "judge_modelAB_results.json",
        "pairs": 4302,
        "verdicts": {"A": 1562, "B": 1426, "Tie(A)": 709, "Tie(B)": 605},
    }
    intjudge, gpt = record["judges"]["IntJudge"], record["judges"]["GPT-4o"]
    assert (intjudge["shared_pairs"], gpt["shared_pairs"]) == (4301, 4302)
    assert f"{intjudge['rules']['fdt']['agreement']:.2f}" == "82.42"
    assert f"{gpt['rules']['fdt']['agreement']:.2f}" == "71.08"
    assert {r: (v["agree"], v["pairs"]) for r, v in intjudge["rules"].items()} == {
        "fdt": (3545, 4301),
        "without_tie": (2152, 2362),
        "tie_as_0": (2858, 4301),
        "tie_as_half": (3474.5, 4301),
    }
    assert {r: (v["agree"], v["pairs"]) for r, v in gpt["rules"].items()} == {
        "fdt": (3058, 4302),
        "without_tie": (2206, 2958),
        "tie_as_0": (2234, 4302),
        "tie_as_half": (2892, 4302),
    }
    assert record["data_files"]["pinned"] is True
    page = (out / "calibration.html").read_text(encoding="utf-8")
    assert "82.42% (3545/4301)" in page and "71.08% (3058/4302)" in page


def test_the_four_rules_on_known_pairs() -> None:
    cases = {  # (human, judge): fdt, without_tie, tie_as_0, tie_as_half
        ("A", "A"): (1, 1, 1, 1),
        ("A", "B"): (0, 0, 0, 0),
        ("Tie(A)", "A"): (1, None, 0, 0.5),
        ("Tie(B)", "A"): (0, None, 0, 0.5),
        ("Tie(A)", "Tie(B)"): (0, None, 1, 1),
        ("Tie", "A"): (1, None, 0, 0.5),
        ("B", "Tie"): (0, None, 0, 0.5),
    }
    for (human, judge), expected in cases.items():
        got = tuple(opening.pair_credit(rule, human, judge) for rule in opening.RULES)
        assert got == expected, (human, judge)


def _verdicts(path: Path, winners: list[str]) -> None:
    rows = [
        {"data_id": str(i), "model_A": {"name": "m1"}, "model_B": {"name": "m2"}, "winner": w}
        for i, w in enumerate(winners)
    ]
    path.write_text(json.dumps(rows), encoding="utf-8")


def test_another_judge_and_a_bad_verdict(tmp_path: Path) -> None:
    _verdicts(tmp_path / opening.HUMAN_FILE, ["A", "B", "Tie(A)", "B"])
    _verdicts(tmp_path / "mine.json", ["A", "A", "A"])  # the fourth pair is not judged
    result = opening.calibrate(tmp_path, {"mine": tmp_path / "mine.json"})
    mine = result["judges"]["mine"]
    assert (mine["shared_pairs"], mine["human_pairs_unjudged"]) == (3, 1)
    assert mine["rules"]["fdt"] == {"agreement": pytest.approx(66.6667), "agree": 2.0, "pairs": 3}
    _verdicts(tmp_path / "bad.json", ["A", "maybe"])
    with pytest.raises(InputError, match=r"bad.json entry 1: winner 'maybe' is not one of A, B"):
        opening.calibrate(tmp_path, {"bad": tmp_path / "bad.json"})
    shutil.rmtree(tmp_path)
    with pytest.raises(InputError, match="no such folder"):
        opening.calibrate(tmp_path)
