"""`data build --from` a batch folder, commands that produce nothing, and the missing-data hint.

Fast: no model is loaded (the runs carry no judge call; the hint is checked before any training).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.data import app
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.train.data.trajectories import discover, find_runs
from tests.helpers.runs import make_run


def batch(root: Path, *, plan: bool = True) -> Path:
    """A batch folder: runs under ``requests/<id>/`` (two levels down), with judge scores."""
    for n in range(2):
        make_run(root / "requests", f"r{n}", [[(False, 3.0), (True, 8.5)], [(True, 9.0)]], plan=plan)
    (root / "batch.json").write_text("{}")
    return root


def test_runs_are_found_at_one_two_or_three_levels(tmp_path: Path) -> None:
    one = batch(tmp_path / "runs" / "eval")
    assert [p.name for p in find_runs(one / "requests" / "r0")] == ["r0"]
    assert [p.name for p in find_runs(one / "requests")] == ["r0", "r1"]
    assert [p.name for p in find_runs(one)] == ["r0", "r1"]
    batch(tmp_path / "runs" / "other")
    assert [p.parent.parent.name for p in find_runs(tmp_path / "runs")] == ["eval", "eval", "other", "other"]
    assert find_runs(tmp_path / "runs" / "eval" / "requests" / "r0" / "images") == []


def test_batch_runs_are_keyed_by_their_path_in_the_batch(tmp_path: Path) -> None:
    root = batch(tmp_path / "eval")
    trajectories = discover(root)
    keys = [a.key for t in trajectories for s in t.steps for a in s.attempts]
    assert keys == [f"requests/r{n}#{s}#{a}" for n in (0, 1) for s, a in ((1, 0), (1, 1), (2, 0))]
    # a folder of runs keeps the plain run name (the key its judge_scores.json uses)
    assert discover(root / "requests")[0].steps[0].attempts[0].key == "r0#1#0"


def test_data_build_accepts_a_batch_folder(tmp_path: Path) -> None:
    root = batch(tmp_path / "runs" / "eval")
    # the batch's per-run judge_scores.json are keyed by run name: copy them to the build cache
    scores = {}
    for n in (0, 1):
        for key, value in json.loads((root / "requests" / f"r{n}" / "judge_scores.json").read_text()).items():
            scores[f"requests/{key}"] = value
    out = tmp_path / "built"
    out.mkdir()
    (out / "judge_scores.json").write_text(json.dumps(scores))
    result = CliRunner().invoke(app, ["build", "--input", str(root), "--out", str(out), "--no-trl"])
    assert result.exit_code == 0, result.output
    assert "trajectories: 2, steps: 4, attempts: 6, unscored steps: 0" in result.output
    assert json.loads((out / "stats.json").read_text())["examples"]["critic_sft"] > 0


def test_a_build_with_zero_examples_says_so_and_exits_1(tmp_path: Path) -> None:
    root = tmp_path / "eval"
    for n in range(2):  # fallback plans (nothing to learn) and no judge scores (no step matches a rule)
        run = make_run(root / "requests", f"r{n}", [[(True, 9.0)]], plan=False)
        (run / "judge_scores.json").unlink()
    result = CliRunner().invoke(app, ["build", "--input", str(root), "--out", str(tmp_path / "built")])
    assert result.exit_code == 1
    assert "error: 0 examples" in result.output and "--judge" in result.output


def test_an_empty_rollout_file_is_an_error(tmp_path: Path) -> None:
    from interleave_thinker.cli.main import app as main_app

    (tmp_path / "r.jsonl").write_text("\n")
    result = CliRunner().invoke(
        main_app,
        [
            "reward",
            "--input",
            str(tmp_path / "r.jsonl"),
            "--generator",
            "tiny:generator",
            "--judge",
            "tiny:judge",
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
    )
    assert result.exit_code == 1
    assert "holds no rollouts" in result.output
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("role", ["planner", "critic"])
def test_missing_sft_data_names_the_command_that_makes_it(tmp_path: Path, role: str) -> None:
    from interleave_thinker.train.sft.trainer import load_training_data

    missing = tmp_path / "data" / "tiny" / f"{role}_sft.json"
    with pytest.raises(ConfigError) as info:
        load_training_data([missing], None)
    message = str(info.value)
    assert str(missing) in message
    assert f"interleave-thinker data synth --role {role} --n 64 --out {missing.parent}" in message


def test_other_missing_data_gets_no_guess(tmp_path: Path) -> None:
    from interleave_thinker.train.sft.trainer import load_training_data

    with pytest.raises(ConfigError) as info:
        load_training_data([tmp_path / "mine.json"], None)
    assert "data synth" not in str(info.value)
