"""The format-trained tiny judge (`tiny:judge`) through `judge`, `reward` and `data build --judge`.

Real tiny models, real files, the CLI in subprocesses. The tiny judge was taught by our own SFT to
score bright pictures high and dark ones low (``train/synthetic.judge_examples``); its quality score
follows the brightness, so its scores are parsed numbers that depend on the image.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from interleave_thinker.agents.judge import Judge
from interleave_thinker.backends.specs import load_vlm_backend
from interleave_thinker.core.prompt_store import TemplateStore
from tests.helpers.common import run_cli
from tests.helpers.runs import BRIGHT, DARK, make_batch, noisy

pytestmark = pytest.mark.slow


def test_tiny_judge_scores_depend_on_the_picture(tmp_path: Path) -> None:
    judge = Judge(load_vlm_backend("tiny:judge", role="judge"), TemplateStore().load(), max_new_tokens=64)
    white = Image.new("RGB", (64, 64), "white")
    bright = judge.judge(white, Image.open(noisy(tmp_path / "b.png", BRIGHT, 1)), "sketch the cat")
    dark = judge.judge(white, Image.open(noisy(tmp_path / "d.png", DARK, 2)), "sketch the cat")
    assert bright.ok and dark.ok, (bright.error, dark.error)
    assert bright.raw_replies["sc"][0].startswith('{"score": [')
    assert bright.overall is not None and dark.overall is not None
    assert bright.pq is not None and dark.pq is not None and bright.pq > dark.pq
    assert bright.overall > dark.overall


def test_judge_command_on_the_tiny_preset_gives_parsed_scores(tmp_path: Path) -> None:
    Image.new("RGB", (64, 64), "white").save(tmp_path / "before.png")
    noisy(tmp_path / "after.png", BRIGHT, 3)
    result = run_cli("judge --before before.png --after after.png --instruction", "ink the dog", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["error"] is None
    assert 0 <= report["sc"] <= 10 and 0 <= report["pq"] <= 10 and len(report["sc_scores"]) == 2
    assert report["overall"] == pytest.approx((report["sc"] * report["pq"]) ** 0.5)
    assert '"score"' not in result.stderr  # replies go to the JSON, not the terminal's log lines
    # The phases as lines (no terminal here, so no bar): loading the judge, then judging, each timed.
    lines = result.stderr.splitlines()
    seconds = r"\d+\.\d s"
    assert "loading the judge tiny:judge…" in lines, result.stderr
    assert any(re.fullmatch(rf"loading the judge tiny:judge: done in {seconds}", ln) for ln in lines)
    judging = "judging: semantic consistency, then perceptual quality"
    assert f"{judging}…" in lines and any(re.fullmatch(rf"{judging}: done in {seconds}", ln) for ln in lines)
    # No model reply reaches the terminal: each one is in the JSON on stdout, none on stderr.
    replies = [reply for kind in ("sc", "pq") for reply in report["raw_replies"][kind]]
    assert len(replies) >= 2 and all(reply.strip() for reply in replies)
    assert not [reply for reply in replies if reply.strip() in result.stderr]
    assert result.stdout.strip() == json.dumps(report, indent=2)  # stdout holds the JSON and nothing else


def rollouts(tmp_path: Path) -> Path:
    """Two failed steps (the judge is asked) and one success (skipped), release reward-input fields."""
    noisy(tmp_path / "images" / "step1.png", (200, 200, 200), 4)
    Image.new("RGB", (64, 64), "white").save(tmp_path / "images" / "white.png")  # text-to-image "before"
    rows = [
        {
            "response": "<think>dark</think><answer>{'previous_step_success': False, "
            "'refine_prompt': 'a bright red cat'}</answer>",
            "ground_truth": {"success": False, "semantics": 0.0, "quality": 0.0},
            "origin_prompt": "draw a cat",
            "origin_image_path": "images/white.png",
            "previous_prompt": "draw a cat",
        },
        {
            "response": "<think>bad</think><answer>{'previous_step_success': False, "
            "'refine_prompt': 'a dog, sharper'}</answer>",
            "ground_truth": {"success": False, "semantics": 10.0, "quality": 10.0},
            "origin_prompt": "ink the dog",
            "origin_image_path": "images/step1.png",
            "previous_prompt": "ink the dog",
        },
        {
            "response": "<think>good</think><answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>",
            "ground_truth": {"success": True, "semantics": 9.0, "quality": 9.0},
            "origin_prompt": "shade the boat",
            "origin_image_path": "images/step1.png",
            "previous_prompt": "shade the boat",
        },
    ]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_reward_command_on_the_tiny_preset_scores_every_judged_rollout(tmp_path: Path) -> None:
    path = rollouts(tmp_path)
    # the tiny judge learnt the images-first turn of `judge` and `data build` (text first, the reward's
    # default, breaks its replies): the earlier order, kept as a flag
    words = "reward --generator tiny:generator --judge tiny:judge --max-new-tokens 64 --deadline 600 --judge-images-first"
    result = run_cli(words, "--input", str(path), "--out", "scored.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert [s["reward_error"] for s in scored] == [None, None, None]
    # ground truth 0 -> the regenerated picture scores above 0.5; ground truth 10 -> at most 0.5
    assert scored[0]["semantic"] > 0.5 and scored[0]["quality"] > 0.5
    assert scored[1]["semantic"] <= 0.5 and scored[1]["quality"] <= 0.5
    assert scored[2]["semantic"] == scored[2]["quality"] == 0.5  # a success is not re-judged


def test_data_build_from_a_batch_with_the_tiny_judge_writes_critic_examples(tmp_path: Path) -> None:
    batch = make_batch(tmp_path / "runs" / "eval")
    words = "data build --out built --judge tiny:judge --judge-max-new-tokens 64 --no-trl"
    result = run_cli(words, "--input", str(batch), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "judge: scored 6 attempt(s)" in result.stderr
    assert '"score"' not in result.stdout + result.stderr  # no model reply on the terminal
    scores = json.loads((tmp_path / "built" / "judge_scores.json").read_text())
    assert sorted(scores) == [f"requests/req{r}#{s}#{a}" for r in (0, 1) for s, a in ((1, 0), (2, 0), (2, 1))]
    for r in (0, 1):
        dark, bright = scores[f"requests/req{r}#2#0"], scores[f"requests/req{r}#2#1"]
        assert bright[0] * bright[1] > dark[0] * dark[1]  # the refinement visibly worked
    critic = json.loads((tmp_path / "built" / "critic_sft.json").read_text())
    assert len(critic) > 0
    stats = json.loads((tmp_path / "built" / "stats.json").read_text())
    assert stats["examples"]["critic_sft"] == len(critic) and stats["examples"]["planner_sft"] == 4


def test_data_build_that_produces_nothing_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    batch = make_batch(tmp_path / "batch", requests=1)
    # the random tiny critic as a judge: every judgement fails to parse
    words = "data build --out built --judge tiny:critic --judge-max-new-tokens 4 --no-trl"
    failed = run_cli(words, "--input", str(batch), cwd=tmp_path)
    assert failed.returncode == 1
    assert "every one of the 3 judgement(s) failed" in failed.stderr
    assert "judge: 3 of 3 judgement(s) failed; details in" in failed.stderr
    errors = (tmp_path / "built" / "judge_errors.jsonl").read_text().splitlines()
    assert len(errors) == 3 and all("unparsable" in json.loads(e) for e in errors)
