"""Builders: the rules' decisions, label balance and SFT:RL ratio, seeded determinism, exports that load back."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.agents.judge import Judge
from interleave_thinker.cli.data import app
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.scripted import ScriptedVLMBackend
from interleave_thinker.train.data.builder import build, write_canvas
from interleave_thinker.train.data.export import export
from interleave_thinker.train.data.loaders import load_critic_rl, load_sft
from interleave_thinker.train.data.rules import BuildRules, apply_ratio, balance, classify
from interleave_thinker.train.data.scoring import score_missing
from interleave_thinker.train.data.trajectories import discover
from interleave_thinker.train.data.trl_format import content_parts, datasets_module
from tests.conftest import shared_path
from tests.helpers.runs import anchored_run, make_run

RULES = BuildRules()


@pytest.mark.parametrize(
    ("scores", "labels", "matched", "pool"),
    [
        ([3.0, 8.5], [False, True], ("refinement_trend", "high_variance"), "sft"),  # refinement worked
        ([8.5, 8.0, 8.6], [True, True, True], ("stable_high",), "sft"),  # high and steady
        ([9.0], [True], ("stable_high",), "sft"),  # one good attempt
        ([8.0, 2.0, 9.0], [False, False, None], ("high_variance",), "rl"),  # last not a labelled success
        ([9.0, 3.0], [False, True], ("high_variance",), "rl"),  # got worse: no trend
        ([5.0, 5.5], [False, True], (), None),  # neither high nor improving enough nor varied
        ([7.5, 9.9], [True, True], ("refinement_trend",), "sft"),  # std 1.2 > low_std: trend only
        ([6.0, None], [False, True], (), None),  # unscored attempt
    ],
)
def test_rules_decide_on_hand_made_score_sequences(
    scores: list[float | None], labels: list[bool | None], matched: tuple[str, ...], pool: str | None
) -> None:
    decision = classify(scores, labels, RULES)
    assert (decision.matched, decision.pool, decision.scored) == (matched, pool, None not in scores)


def test_thresholds_are_configurable() -> None:
    strict = BuildRules(high_score=9.5, high_std=5.0, trend_min_gain=6.0)
    assert classify([8.0, 8.5], [True, True], strict).pool is None
    assert classify([3.0, 8.5], [False, True], strict).matched == ()
    assert classify([2.0, 8.5], [False, True], strict).matched == ("refinement_trend",)


def test_balance_and_ratio_keep_labels_even() -> None:
    items = [("a", True)] * 7 + [("b", False)] * 3
    rng = random.Random(0)
    down = balance(items, lambda x: x[1], "downsample", rng)
    up = balance(items, lambda x: x[1], "upsample", rng)
    assert sorted(x[1] for x in down) == [False] * 3 + [True] * 3
    assert sorted(x[1] for x in up) == [False] * 7 + [True] * 7
    sft = [(i, i % 2 == 0) for i in range(20)]
    rl = [(i, i % 2 == 0) for i in range(4)]
    kept_sft, kept_rl = apply_ratio(sft, rl, 2.0, (lambda x: x[1], lambda x: x[1]), rng)
    assert (len(kept_sft), len(kept_rl)) == (8, 4)
    assert sum(x[1] for x in kept_sft) == 4
    few_sft, many_rl = apply_ratio(
        sft[:4], [(i, i % 2 == 0) for i in range(10)], 2.0, (lambda x: x[1],) * 2, rng
    )
    assert (len(few_sft), len(many_rl)) == (4, 2)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for n in range(6):
        make_run(
            root,
            f"run{n}",
            [
                [(False, 3.0), (True, 8.5)],  # refinement trend -> SFT (one False, one True)
                [(True, 9.0)],  # stable high -> SFT (True)
                [(True, 8.0 + n % 2)],  # stable high -> SFT (True)
                [(False, 9.0), (False, 2.0), (None, 5.0)],  # high variance -> RL (two labelled)
            ],
        )
    make_run(root, "fallback", [[(True, 9.0)]], plan=False)
    return root


def test_build_from_runs_counts_balance_ratio_and_seed(runs: Path, tmp_path: Path) -> None:
    canvas = write_canvas(tmp_path / "white.png")
    trajectories = discover(runs)
    result = build(trajectories, builtin_templates(), canvas, seed=3)
    stats = result.stats
    assert (stats.trajectories, stats.steps, stats.unscored_steps) == (7, 25, 0)
    assert stats.rules == {"refinement_trend": 6, "stable_high": 13, "high_variance": 12}
    assert stats.pools == {"sft": 19, "rl": 6, "unused": 0}
    assert stats.labels["critic_sft_filtered"] == {"true": 19, "false": 6}
    assert stats.labels["critic_rl_filtered"] == {"true": 0, "false": 12}
    # balanced SFT (6 + 6), then RL trimmed to half of it; RL has only False labels, so it stays one-sided
    assert stats.labels["critic_sft"] == {"true": 6, "false": 6}
    assert len(result.critic_rl) == 6
    # planner: 6 plans + 6 guidance cuts (the fallback run's plan is not learned)
    assert stats.examples["planner_sft"] == 12
    cut = next(e for e in result.planner_sft if e.images)
    assert cut.messages[0].content.count("<image>") == len(cut.images)
    again = build(discover(runs), builtin_templates(), canvas, seed=3)
    other = build(discover(runs), builtin_templates(), canvas, seed=4)
    assert (again.critic_sft, again.critic_rl, again.planner_sft) == (
        result.critic_sft,
        result.critic_rl,
        result.planner_sft,
    )
    assert other.critic_sft != result.critic_sft


def test_exports_load_back_as_the_same_examples(runs: Path, tmp_path: Path) -> None:
    canvas = write_canvas(tmp_path / "white.png")
    result = build(discover(runs), builtin_templates(), canvas, seed=0)
    out = tmp_path / "out"
    moved = export(result, out)
    assert load_sft(out / "planner_sft.json", role="planner") == moved.planner_sft
    assert load_sft(out / "critic_sft.json", role="critic") == moved.critic_sft
    assert load_critic_rl(out / "critic_rl.jsonl") == moved.critic_rl
    assert [e.messages for e in moved.critic_sft] == [e.messages for e in result.critic_sft]
    assert [Image.open(p).tobytes() for p in moved.critic_sft[0].images] == [
        Image.open(p).tobytes() for p in result.critic_sft[0].images
    ]
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["interleave_critic_sft"]["file_name"] == "critic_sft.json"
    assert info["interleave_critic_sft"]["formatting"] == "sharegpt"
    ds = datasets_module()
    assert len(ds.load_from_disk(str(out / "trl" / "critic_sft"))) == len(moved.critic_sft)
    assert ds.load_from_disk(str(out / "trl" / "critic_rl"))[0]["ground_truth"]["success"] is False


def test_build_keeps_the_other_dataset_info_entries(runs: Path, tmp_path: Path) -> None:
    """A folder LLaMA-Factory already reads keeps its other datasets; a rebuild replaces only ours."""
    out = tmp_path / "out"
    out.mkdir()
    mine = {"file_name": "mine.json", "formatting": "alpaca"}
    (out / "dataset_info.json").write_text(json.dumps({"mine": mine, "interleave_critic_sft": {}}))
    result = build(discover(runs), builtin_templates(), write_canvas(tmp_path / "white.png"), seed=0)
    export(result, out, trl=False)
    info = json.loads((out / "dataset_info.json").read_text())
    assert sorted(info) == ["interleave_critic_sft", "interleave_planner_sft", "mine"]
    assert info["mine"] == mine
    assert info["interleave_critic_sft"]["file_name"] == "critic_sft.json"


def test_records_build_with_judge_scores_for_missing_attempts(tmp_path: Path) -> None:
    data = shared_path("fixtures", "train-data")
    trajectories = discover(data / "records", image_dir=data)
    assert [len(s.attempts) for s in trajectories[0].steps] == [2, 1]
    assert (
        trajectories[0].steps[0].attempts[1].used_prompt.endswith("no colour")
    )  # attempt 2 used the refinement
    replies = ['{"score": [2, 3], "reasoning": "x"}', '{"score": [6], "reasoning": "x"}'] + [
        '{"score": [9, 9], "reasoning": "x"}'
    ] * 4
    judge = Judge(ScriptedVLMBackend(replies), builtin_templates())
    scores, errors = score_missing(trajectories, judge)
    assert errors == []
    assert scores == {"1_cat#1#0": (2.0, 6.0), "1_cat#1#1": (9.0, 9.0), "1_cat#2#0": (9.0, 9.0)}
    result = build(trajectories, builtin_templates(), write_canvas(tmp_path / "w.png"), seed=0)
    assert result.stats.rules == {"refinement_trend": 1, "stable_high": 1, "high_variance": 1}
    assert result.stats.labels["critic_sft_filtered"] == {"true": 2, "false": 1}
    assert [len(e.images) for e in result.planner_sft] == [0, 1]


def test_build_and_stats_commands(runs: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "built"
    built = runner.invoke(app, ["build", "--input", str(runs), "--out", str(out), "--seed", "1", "--no-trl"])
    assert built.exit_code == 0, built.output
    assert "rules matched (steps): refinement_trend 6, stable_high 13, high_variance 12" in built.output
    assert json.loads((out / "stats.json").read_text())["examples"] == {
        "planner_sft": 12,
        "critic_sft": 12,
        "critic_rl": 6,
    }
    stats = runner.invoke(app, ["stats", "--input", str(runs), "--json"])
    assert json.loads(stats.output)["pools"] == {"sft": 19, "rl": 6, "unused": 0}
    rules = tmp_path / "rules.yaml"
    rules.write_text("high_scor: 8\n")
    bad = runner.invoke(app, ["stats", "--input", str(runs), "--rules", str(rules)])
    assert bad.exit_code != 0
    assert "unknown key 'high_scor'" in str(bad.exception)


def test_quiet_build_hides_the_datasets_bars(runs: Path, tmp_path: Path) -> None:
    """`-q` hides "Saving the dataset" too, and only while the command runs."""
    shown = {}
    for flags in ([], ["-q"]):
        out = tmp_path / f"built{len(flags)}"
        result = CliRunner().invoke(app, ["build", "--input", str(runs), "--out", str(out), *flags])
        assert result.exit_code == 0, result.output
        assert len(datasets_module().load_from_disk(str(out / "trl" / "critic_sft"))) == 12
        shown[len(flags)] = "Saving the dataset" in result.stderr
    assert shown == {0: True, 1: False}
    assert not datasets_module().utils.are_progress_bars_disabled()


def test_unscored_records_build_planner_pairs_and_empty_critic_sets(tmp_path: Path) -> None:
    data = shared_path("fixtures", "train-data")
    out = tmp_path / "built"
    result = CliRunner().invoke(
        app, ["build", "--input", str(data / "records"), "--image-dir", str(data), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "trajectories: 1, steps: 2, attempts: 3, unscored steps: 2" in result.output
    ds = datasets_module()
    assert len(ds.load_from_disk(str(out / "trl" / "planner_sft"))) == 2
    assert sorted(p.name for p in (out / "trl").iterdir()) == ["planner_sft"]  # empty sets are not saved
    assert (out / "critic_rl.jsonl").read_text() == ""


def test_a_run_with_references_builds_the_rows_its_critic_read(tmp_path: Path) -> None:
    """`data build` on a run made under `loop.references: anchor`: each critic row (SFT and RL) holds
    the message the critic read in the run, its text byte for byte (our references template where it
    had references) and its images in order (before, after, then the references); the policy is recorded."""
    run, calls = anchored_run(tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text("balance_labels: none\nsft_rl_ratio: null\n")  # every labelled attempt, in order
    out = tmp_path / "built"
    built = CliRunner().invoke(
        app, ["build", "--input", str(run), "--out", str(out), "--rules", str(rules), "--no-trl"]
    )
    assert built.exit_code == 0, built.output
    assert "references policy (trajectories): anchor 1" in built.output
    assert "critic examples with references: critic_sft 3, critic_rl 2" in built.output
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["policies"], stats["with_references"]) == ({"anchor": 1}, {"critic_sft": 3, "critic_rl": 2})
    sft = load_sft(out / "critic_sft.json", role="critic")
    rl = load_critic_rl(out / "critic_rl.jsonl")
    rows = [(e.messages[0].content, e.images) for e in sft] + [(e.problem, e.images) for e in rl]
    assert [len(images) for _, images in rows] == [
        2,
        2,
        3,
        4,
        4,
        4,
        4,
    ]  # steps 1, 1, 2, 3, 3 (SFT), 4, 4 (RL)
    assert len(calls) == len(rows)
    for (text, images), call in zip(rows, calls, strict=True):
        assert [m["role"] for m in call] == ["user"]
        read = [{"type": part["type"], "text": part.get("text")} for part in call[0]["content"]]
        assert content_parts(text) == read
        pictures = [Image.open(p) for p in images]
        assert [(im.size, im.tobytes()) for im in pictures] == [
            (im.size, im.tobytes()) for im in ScriptedVLMBackend.images_in(call)
        ]
    assert "2 reference image(s)" in rows[3][0] and "reference image" not in rows[0][0]
