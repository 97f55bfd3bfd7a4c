"""The offline consistency scorer (colour hashes, no VLM): it separates a fixed broken sequence from its
unbroken twin and finds the break, and `eval score consistency --scorer perceptual` scores run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.eval.calibration import drift
from interleave_thinker.eval.perceptual import PerceptualScorer

FIXED = {"identity": 0, "colour": 1}  # seeds of the suite (seed 2026): a swap at step 6, and at step 4


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.mark.parametrize("kind", sorted(FIXED))
def test_a_broken_sequence_scores_below_its_twin_at_the_break(kind: str) -> None:
    scorer = PerceptualScorer()
    broken = drift.make_sequence(kind, FIXED[kind], True)
    twin = drift.make_sequence(kind, FIXED[kind], False)
    got, unbroken = scorer.pairs(broken.images), scorer.pairs(twin.images)
    lowest = min(range(len(got)), key=lambda i: got[i])
    assert lowest + 2 == broken.break_step, (got, broken.break_step)
    assert min(got) < min(unbroken) - 0.4, (got, unbroken)
    assert got[:lowest] == unbroken[:lowest]  # identical pictures before the swap score alike


def test_score_consistency_with_the_offline_scorer(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    drift.write_suite(runs, drift.SuiteSpec(per_kind=1, steps=3, size=64, seed=5))
    out = tmp_path / "scores"
    result = invoke(
        "eval", "score", "consistency", "--outputs", str(runs), "--scorer", "perceptual", "--out", str(out)
    )
    assert result.exit_code == 0, (result.output, result.exception)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["counts"] == {"items": 8, "scored": 8, "failed": 0, "missing_outputs": 0}
    assert summary["scorer"]["library"] == "imagehash==4.3.2"
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(len(r["pairs"]) == 2 and 0 <= r["score"] <= 10 for r in rows)
    assert sorted(summary["categories"]) == sorted(drift.KINDS)
    refused = invoke(
        "eval",
        "score",
        "consistency",
        "--outputs",
        str(runs),
        "--scorer",
        "perceptual",
        "--judge",
        "openai:http://127.0.0.1:9/v1#m",
    )
    assert isinstance(refused.exception, ConfigError) and "--judge is not used by --scorer perceptual" in str(
        refused.exception
    )
    missing = invoke("eval", "score", "consistency", "--outputs", str(runs))
    assert isinstance(missing.exception, ConfigError) and "--judge is required" in str(missing.exception)
    assert "--preset tiny brings the stand-in tiny:judge" in str(missing.exception)
    unknown = invoke("eval", "score", "consistency", "--outputs", str(runs), "--scorer", "clip")
    assert isinstance(unknown.exception, ConfigError) and "use perceptual" in str(unknown.exception)
