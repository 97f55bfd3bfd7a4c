"""The judge and the step-wise reward through the real tiny models, in process and from the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.agents.judge import Judge
from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend
from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.doubles.judge import image_urls, judge_server
from interleave_thinker.testing.recording import RecordingImage, ScriptedOverTiny
from interleave_thinker.train.rewards import CriticReward, StepwiseScorer
from tests.conftest import shared_path
from tests.helpers.common import run_cli

pytestmark = pytest.mark.slow


def rollouts(tmp_path: Path) -> Path:
    """The shared critic_rl fixture with one critic response per line, images copied beside it."""
    fixture = shared_path("fixtures", "train-data")
    shutil.copytree(fixture / "images", tmp_path / "images")
    responses = [
        "<think>bad</think><answer>{'previous_step_success': False, 'refine_prompt': 'a black line sketch of a cat'}</answer>",
        "<think>good</think><answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>",
        "<answer>{'previous_step_success': False, 'refine_prompt': ''}</answer>",
    ]
    lines = []
    for row, response in zip(
        (json.loads(x) for x in (fixture / "critic_rl.jsonl").read_text().splitlines()),
        responses,
        strict=True,
    ):
        lines.append(json.dumps(row | {"response": response}))
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def scored_by(reward: CriticReward, rows: list[dict[str, Any]], truth: str) -> list[float]:
    """``reward`` over ``rows`` as TRL calls it: the responses, then each dataset column by name (the
    ground truth under ``truth``: the release's ``evaluation`` or our ``ground_truth``)."""
    columns = {
        key: [r[key] for r in rows] for key in ("origin_prompt", "origin_image_path", "previous_prompt")
    }
    return reward(None, [r["response"] for r in rows], **{truth: [r["evaluation"] for r in rows]}, **columns)


def test_stepwise_reward_on_tiny_models(tmp_path: Path) -> None:
    path = rollouts(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    generator = RecordingImage(load_image_backend("tiny:generator"))
    judge_vlm = ScriptedOverTiny(
        load_vlm_backend("tiny:judge"),
        [lambda m: '{"score": [6, 8]}' if len(ScriptedOverTiny.images_in(m)) == 2 else '{"score": [9, 7]}'],
        repeat_last=True,
    )
    scorer = StepwiseScorer(generator, Judge(judge_vlm, builtin_templates()), base_dir=tmp_path)
    values = scored_by(CriticReward(scorer), rows, truth="evaluation")
    # row 1: gt failure (sem 1, qual 6), regenerated from the white canvas: SC 6, PQ 7
    # row 2: gt success -> skipped; prediction True matches
    # row 3: gt success, prediction False -> accuracy 0, skipped
    assert [c.prompt for c in generator.calls] == ["a black line sketch of a cat"]
    call = generator.calls[0]
    assert call.image is None and call.seed == 0 and call.output.size == (64, 64)
    assert sorted(judge_vlm.processed_images) == [1, 2]  # SC sees [before, after], PQ sees [after]
    semantic, quality = ((6 - 1) / 10 + 1) / 2, ((7 - 6) / 10 + 1) / 2
    assert values == pytest.approx([0.5 + 0.5 * (0.2 + 0.6 * semantic + 0.2 * quality), 0.8, 0.7])
    scorer.close()


def test_reward_cli_on_tiny_models(tmp_path: Path) -> None:
    path = rollouts(tmp_path)
    out = tmp_path / "scored.jsonl"
    # the judge is tiny:critic, a random model: the failure path (tiny:judge is format-trained). Images
    # first: a text-first judgement (the reward's default) is a registered shape, which every tiny model
    # answers in its format as it decodes (tiny/formats.py), so it would parse
    words = "reward --generator tiny:generator --judge tiny:critic --max-new-tokens 12 --judge-images-first"
    result = run_cli(words, "--input", str(path), "--out", str(out), timeout=600)
    assert result.returncode == 1, result.stderr  # the one judged rollout failed: nothing useful, said so
    assert "every step-wise scoring failed" in result.stderr
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    originals = [json.loads(line) for line in path.read_text().splitlines()]
    assert [s["response"] for s in scored] == [o["response"] for o in originals]  # input order, fields kept
    # the untrained tiny judge cannot produce a parsable score: an error and 0.5/0.5, never a guess
    assert scored[0]["semantic"] == scored[0]["quality"] == 0.5 and "unparsable" in scored[0]["reward_error"]
    assert [(s["format"], s["accuracy"]) for s in scored] == [(1.0, 1.0), (1.0, 1.0), (1.0, 0.0)]
    assert [s["overall"] for s in scored] == pytest.approx([0.8, 0.8, 0.7])


def test_judge_cli_reports_failure_honestly(tmp_path: Path) -> None:
    Image.new("RGB", (64, 64), "white").save(tmp_path / "a.png")
    Image.new("RGB", (64, 64), "red").save(tmp_path / "b.png")
    # the judge is tiny:critic, a random model: the failure path (tiny:judge is format-trained)
    words = "judge --before a.png --after b.png --judge tiny:critic --max-new-tokens 12 --instruction"
    result = run_cli(words, "a red square", cwd=tmp_path, timeout=600)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["sc"] is None and report["overall"] is None and "unparsable" in report["error"]
    assert len(report["raw_replies"]["sc"]) == 3


def test_stepwise_reward_with_a_judge_served_over_http(tmp_path: Path) -> None:
    """The judge behind the project's OpenAI-compatible server (real HTTP), the tiny generator local."""
    from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
    from tests.helpers.served import InProcessServer

    path = rollouts(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    served_judge = ScriptedOverTiny(
        load_vlm_backend("tiny:judge"),
        [
            lambda m: (
                '||V^=^V|| {"score": [4, 9], "reasoning": "sc"} ||V^=^V||'
                if len(ScriptedOverTiny.images_in(m)) == 2
                else "[5, 8]"
            )
        ],
        repeat_last=True,
    )
    with InProcessServer(served_judge, "judge") as server:
        client = OpenAIVLMBackend(f"{server.url}/v1", "judge")
        scorer = StepwiseScorer(
            load_image_backend("tiny:generator"), Judge(client, builtin_templates()), base_dir=tmp_path
        )
        values = scored_by(CriticReward(scorer), rows, truth="ground_truth")
        scorer.close()
        client.close()
    assert sorted(served_judge.processed_images) == [
        1,
        2,
    ]  # images crossed HTTP and reached the real processor
    semantic, quality = ((4 - 1) / 10 + 1) / 2, ((5 - 6) / 10 + 1) / 2
    assert values == pytest.approx([0.5 + 0.5 * (0.2 + 0.6 * semantic + 0.2 * quality), 0.8, 0.7])


def test_reward_cli_reads_the_release_critic_rl_rows_as_they_are(tmp_path: Path) -> None:
    """The release's rows are prompts (no response): the tiny critic answers them, then they are scored."""
    fixture = shared_path("fixtures", "train-data")
    shutil.copytree(fixture / "images", tmp_path / "images")
    path = tmp_path / "critic_rl.jsonl"
    shutil.copy(fixture / "critic_rl.jsonl", path)
    out = tmp_path / "scored.jsonl"
    args = ["reward", "--input", str(path), "--generator", "tiny:generator", "--out", str(out)]
    refused = CliRunner().invoke(app, [*args, "--judge", "tiny:judge"])
    assert isinstance(refused.exception, InputError)
    assert f"{path}:1: response: missing (3 row(s))" in str(refused.exception)
    assert "pass --critic SPEC" in str(refused.exception)

    def script(body: dict[str, object]) -> str:  # SC 6 over [before, after], PQ 7 over [after]
        return '{"score": [6, 8]}' if len(image_urls(body)) == 2 else '{"score": [9, 7]}'

    with judge_server(script) as server:
        judge = f"openai:{server.url}#judge"
        result = CliRunner().invoke(app, [*args, "--judge", judge, "--critic", "tiny:critic-sft"])
        calls = len(server.bodies)
    assert result.exit_code == 0, result.output
    originals = [json.loads(line) for line in path.read_text().splitlines()]
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: s[k] for k in o} for s, o in zip(scored, originals, strict=True)] == originals  # kept as is
    assert all(isinstance(s["response"], str) and s["response"] for s in scored)  # the critic's replies
    assert "ground_truth" not in scored[0]  # evaluation read under its release name, not copied
    # row 1 failed (semantics 1, quality 6): regenerated and judged; rows 2 and 3 succeeded: skipped
    assert scored[0]["semantic"] == pytest.approx(((6 - 1) / 10 + 1) / 2)
    assert scored[0]["quality"] == pytest.approx(((7 - 6) / 10 + 1) / 2)
    assert [s["reward_error"] for s in scored] == [None, None, None] and calls == 2
    assert [(s["semantic"], s["quality"]) for s in scored[1:]] == [(0.5, 0.5), (0.5, 0.5)]
