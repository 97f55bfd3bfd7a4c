"""The drift suite: seeded pictures with a known swap at a known step, its run folders and truth, and
AUROC / localisation from any scorer's pair scores (arithmetic on scores written by hand)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.calibration import drift

TINY = drift.SuiteSpec(per_kind=1, steps=3, size=48, seed=11)


def _digest(sequence: drift.Sequence) -> str:
    return hashlib.sha256(b"".join(image.tobytes() for image in sequence.images)).hexdigest()


def test_sequences_are_seeded_and_twins_differ_only_from_the_break() -> None:
    for kind in drift.KINDS:
        broken = drift.make_sequence(kind, 3, True, TINY)
        twin = drift.make_sequence(kind, 3, False, TINY)
        assert _digest(broken) == _digest(drift.make_sequence(kind, 3, True, TINY))
        assert broken.break_step is not None and 2 <= broken.break_step <= TINY.steps
        same = [a.tobytes() == b.tobytes() for a, b in zip(broken.images, twin.images, strict=True)]
        assert same == [step < broken.break_step for step in range(1, TINY.steps + 1)], kind
    with pytest.raises(ValueError, match="use one of identity, colour, style, scene"):
        drift.make_sequence("mood", 0, True, TINY)


def test_auroc_and_localisation_from_pair_scores() -> None:
    truths = {
        "a": {"kind": "colour", "broken": True, "break_step": 3},
        "b": {"kind": "colour", "broken": True, "break_step": 2},
        "c": {"kind": "colour", "broken": False, "break_step": None},
        "d": {"kind": "colour", "broken": False, "break_step": None},
        "e": {"kind": "scene", "broken": True, "break_step": 2},
    }
    scores = {
        "a": [9.0, 4.0, 8.0],  # lowest pair 2 ends at step 3: located; 6.0 below ten
        "b": [9.0, 7.0, 9.5],  # lowest pair 2 ends at step 3, not 2: missed; 3.0
        "c": [9.0, 8.0, 9.0],  # 2.0
        "d": [7.0, 9.0, 9.0],  # 3.0: ties with b
    }
    result = drift.measure_pairs(truths, scores)
    assert result["colour"] == {
        "auroc": 0.875,
        "localisation": 0.5,
        "broken": 2,
        "unbroken": 2,
        "unscored": 0,
    }
    assert result["scene"] == {"auroc": None, "localisation": None, "unscored": 1}


def test_the_suite_as_run_folders_and_a_missing_score_file(tmp_path: Path) -> None:
    ids = drift.write_suite(tmp_path, TINY)
    assert len(ids) == len(drift.KINDS) * 2
    record = json.loads((tmp_path / drift.TRUTH_FILE).read_text(encoding="utf-8"))
    assert record["suite"]["seed"] == 11 and set(record["sequences"]) == set(ids)
    assert sorted(p.name for p in (tmp_path / "requests" / ids[0] / "images").iterdir()) == [
        "step1.png",
        "step2.png",
        "step3.png",
    ]
    with pytest.raises(InputError, match="score the suite first"):
        drift.measure_scored(tmp_path, tmp_path / "scores")
