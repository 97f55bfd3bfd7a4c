"""`train grpo` does not train on fallbacks alone (issue 47, items 4 and 5): a dead judge stops it before the
policy loads (the preflight), a judge that breaks mid-run stops it at the failure budget's window with a
checkpoint that `--resume` continues once the judge recovers, and a run with a few failures completes and
says so. The judge is a real OpenAI-compatible server on 127.0.0.1, the generator the scripted "/edit"
server; the policy is the tiny critic, a few steps on CPU."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import BackendError, RunFailedError
from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.judge import JudgeServer
from interleave_thinker.testing.doubles.server import LocalServer
from tests.helpers.common import free_port

GOOD = '{"score": [7, 8], "reasoning": "fine"}'
BAD = "I cannot answer"


class Breaking:
    """The judge's replies: good until :meth:`fail` sets a share; then, counting from there, call n is
    unparsable when n x share passes a whole number (0.7: calls 2, 3, 5, 6, 7, 9, 10 of every ten)."""

    def __init__(self) -> None:
        self.share, self.calls = 0.0, 0
        self.lock = threading.Lock()

    def fail(self, share: float) -> None:
        with self.lock:
            self.share, self.calls = share, 0

    def __call__(self, body: dict[str, Any]) -> str:
        with self.lock:
            self.calls += 1
            n = self.calls
            return BAD if int(n * self.share + 1e-9) > int((n - 1) * self.share + 1e-9) else GOOD


@pytest.fixture(scope="module")
def edit() -> Iterator[str]:
    with LocalServer(scripted_models.handler("edit", scripted_models.State())) as server:
        yield f"http:{server.url}"


def grpo_config(folder: Path, judge: str, generator: str, max_steps: int) -> Path:
    settings = {
        "role": "critic",
        "output_dir": str(folder / "grpo"),
        "model": {"name_or_path": "tiny:critic", "image_max_pixels": 4096},
        "data": {"synthetic": 12},  # new prompts every step: no judgement comes from the reward's cache
        "reward": {
            "judge": judge,
            "generator": generator,
            "regenerate_size": None,
            "judge_max_attempts": 1,
            "failure_window": 2,
        },
        "remote": {"max_retries": 0, "timeout": 10},
        "training": {
            "num_generations": 2,
            "per_device_train_batch_size": 4,
            "max_steps": max_steps,
            "max_completion_length": 8,
            "bf16": False,
            "use_cpu": True,
            "report_to": "none",
            "save_steps": 100,
            "seed": 3,
        },
    }
    path = folder / "grpo.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def train(config: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["train", "grpo", "--config", str(config), *extra])


def test_a_dead_judge_stops_train_grpo_before_the_policy_loads(edit: str, tmp_path: Path) -> None:
    dead = f"openai:http://127.0.0.1:{free_port()}/v1#judge"
    result = train(grpo_config(tmp_path, dead, edit, max_steps=2))
    assert result.exit_code == 1
    assert isinstance(result.exception, BackendError)
    message = str(result.exception)
    assert message.startswith(f"preflight: the judge {dead} gave no SC score (SC judgement got no reply (")
    assert "--no-preflight" in message
    assert "loading model" not in result.output  # stopped before the policy, before any step
    assert not list((tmp_path / "grpo").glob("checkpoint-*"))


def test_a_judge_that_never_parses_is_named_with_its_reply(edit: str, tmp_path: Path) -> None:
    with JudgeServer(lambda body: '{"score": 8]') as server:
        judge = f"openai:{server.url}#judge"
        result = train(grpo_config(tmp_path, judge, edit, max_steps=2))
    assert result.exit_code == 1
    message = str(result.exception)
    assert message.startswith(f"preflight: the judge {judge} gave no SC score (SC judgement unparsable")
    assert """it answered '{"score": 8]'""" in message


def test_a_judge_failing_from_step_3_stops_at_the_window_and_resume_runs_on(
    edit: str, tmp_path: Path
) -> None:
    from transformers import TrainerCallback

    from interleave_thinker.train.grpo.config import GRPORunConfig
    from interleave_thinker.train.grpo.trainer import run_grpo

    script = Breaking()

    class BreakAtStep3(TrainerCallback):  # the judge's service degrades as step 3 starts
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 2:
                script.fail(0.7)

    with JudgeServer(script) as server:
        judge = f"openai:{server.url}#judge"
        path = grpo_config(tmp_path, judge, edit, max_steps=6)
        with pytest.raises(RunFailedError) as stopped:
            run_grpo(GRPORunConfig.load(path), callbacks=[BreakAtStep3()])
        message = str(stopped.value)
        assert "over the last 2 logging steps (steps 3-4), above the tolerated 50%" in message
        assert f"from the judge {judge}: RuntimeError: " in message and "judgement unparsable" in message
        assert "Training stopped at step 4" in message and "--resume" in message
        checkpoints = sorted(p.name for p in (tmp_path / "grpo").glob("checkpoint-*"))
        assert checkpoints == ["checkpoint-4"]
        assert not (tmp_path / "grpo" / "model.safetensors").exists()  # no final model: not finished

        script.fail(0.25)  # the judge recovers but for one call in four: the run goes on to its end
        resumed = train(path, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "trained 6 steps (2 in this run, from step 4)" in resumed.output
    assert "fell back to 0.5" in resumed.output  # the few failures' counts in the last lines
    assert (tmp_path / "grpo" / "model.safetensors").is_file()
