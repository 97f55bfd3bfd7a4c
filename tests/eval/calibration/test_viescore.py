"""`eval calibrate viescore`: GPT-4o's stored VIEScore answers, read by our parser, against ImagenHub's
human ratings (../shared): the per-task table, the raters' ceiling equal to the authors' notebook, the
paper's headline figures, seeded bootstrap intervals, and a refused answer counted, not guessed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ParseError
from interleave_thinker.eval.calibration import viescore
from tests.conftest import shared_path

SPEARMAN_SC = {  # per task, judge (human ceiling), measured by this code from the pinned files
    "ImagenHub_Control-Guided_IG": (0.4972, 0.5442),
    "ImagenHub_Mask-Guided_IE": (0.5421, 0.5390),
    "ImagenHub_Multi-Concept_IC": (0.4516, 0.5927),
    "ImagenHub_Subject-Driven_IE": (0.4800, 0.4887),
    "ImagenHub_Subject-Driven_IG": (0.4806, 0.4779),
    "ImagenHub_Text-Guided_IE": (0.4062, 0.4230),
    "ImagenHub_Text-Guided_IG": (0.4989, 0.5044),
}
NOTEBOOK_HUMAN2HUMAN = {  # analyze_json.ipynb's printed "Human2Human" (SC, PQ, O), scipy's spearmanr
    ("ImagenHub_Multi-Concept_IC", "TextualInversion"): (0.699, 0.5803, 0.698),
    ("ImagenHub_Multi-Concept_IC", "CustomDiffusion"): (0.7256, 0.4838, 0.7217),
    ("ImagenHub_Text-Guided_IE", "Prompt2prompt"): (0.588, 0.5028, 0.5811),
    ("ImagenHub_Mask-Guided_IE", "SDXLInpaint"): (0.6574, 0.5928, 0.6556),
    ("ImagenHub_Subject-Driven_IG", "DreamBoothLora"): (0.3903, 0.443, 0.3878),
}


@pytest.fixture(scope="module")
def data() -> Path:
    return shared_path("reference", "calibration", "viescore", "paper_implementation")


@pytest.fixture(scope="module")
def models(data: Path) -> list[viescore.Model]:
    return viescore.load(data)


def test_the_table_printed_and_written(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["eval", "calibrate", "viescore", "--data", str(data), "--out", str(out), "--resamples", "0"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "4801 answers used, 0 refused by our parser" in result.output
    record: dict[str, Any] = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    got = {
        task: (entry["spearman"]["SC"]["judge"]["value"], entry["spearman"]["SC"]["ceiling"]["value"])
        for task, entry in record["tasks"].items()
    }
    assert got == SPEARMAN_SC
    overall = record["overall"]
    # The paper's abstract: GPT-4o about 0.4 with people, people with each other about 0.45 (overall O).
    assert (overall["spearman"]["O"]["judge"], overall["spearman"]["O"]["ceiling"]) == (0.4036, 0.4558)
    assert (overall["kendall"]["SC"]["judge"], overall["kendall"]["SC"]["ceiling"]) == (0.3864, 0.4527)
    assert record["answers"]["truncation_differs"] == 2
    assert record["data_files"]["pinned"] is True
    assert "Text-Guided_IG" in (out / "calibration.html").read_text(encoding="utf-8")


def test_the_ceiling_is_the_authors_human_to_human(models: list[viescore.Model]) -> None:
    by_name = {(m.task, m.name): m for m in models}
    for key, expected in NOTEBOOK_HUMAN2HUMAN.items():
        cells = by_name[key].raters[None]
        got = tuple(
            round(float(viescore.ceiling_batch(cells, m, "spearman")[0]), 4) for m in viescore.METRICS
        )
        assert got == expected, key


def test_bootstrap_intervals_are_seeded_and_hold_the_estimate(models: list[viescore.Model]) -> None:
    group = [m for m in models if m.task == "ImagenHub_Multi-Concept_IC"]
    first = viescore.task_interval(group, "SC", "spearman", "judge", 24, seed=7)
    assert first == viescore.task_interval(group, "SC", "spearman", "judge", 24, seed=7)
    assert first != viescore.task_interval(group, "SC", "spearman", "judge", 24, seed=8)
    low, high = first
    assert low is not None and high is not None
    assert low < viescore.task_value(group, "SC", "spearman", "judge") < high


def test_our_parser_reads_each_answer_and_refuses_what_it_cannot() -> None:
    assert viescore.judged({"score": [8, 7], "reasoning": "fine"}) == (0.7, False)
    assert viescore.judged({"score": [6.5, 9], "reasoning": ""}) == (0.65, True)
    with pytest.raises(ParseError, match="outside 0-10"):
        viescore.judged({"score": [11], "reasoning": ""})
    with pytest.raises(ParseError):
        viescore.judged({"score": [], "reasoning": ""})
