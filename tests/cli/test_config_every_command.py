"""Every command reads the same settings: a ``--config`` file changes what each one does.

The served judge is a real HTTP server on 127.0.0.1 speaking the OpenAI chat wire format; it answers
500 so that the retry count set by ``remote.max_retries`` shows in the number of requests it receives.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ConfigError, TemplateError
from interleave_thinker.core.prompt_store import builtin_templates
from tests.helpers.runs import rollout

MARKER = "CONFIG-MARKER-7f3a"


class Recorder:
    """An OpenAI-compatible endpoint that records every POST (path, body, auth) and answers 500."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                recorder.posts.append(
                    {
                        "path": self.path,
                        "body": self.rfile.read(length).decode(),
                        "auth": self.headers["Authorization"],
                    }
                )
                payload = b'{"error": {"message": "overloaded", "type": "server_error"}}'
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.close()


def custom_templates(folder: Path) -> Path:
    """Our built-in templates with a marker appended: edited on purpose (prompts.verify: false)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in builtin_templates().texts.items():
        (folder / f"{name}.txt").write_text(text + f"\n{MARKER}\n", encoding="utf-8")
    return folder


def write_config(path: Path, **sections: Any) -> Path:
    path.write_text(yaml.safe_dump(sections))
    return path


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300", **(env or {})})


def images(tmp_path: Path) -> tuple[str, str]:
    before, after = tmp_path / "before.png", tmp_path / "after.png"
    Image.new("RGB", (32, 32), (255, 255, 255)).save(before)
    Image.new("RGB", (32, 32), (200, 30, 30)).save(after)
    return str(before), str(after)


# 1. model.device reaches every command that reads settings (checked before any model loads).
COMMANDS = {
    "run": ["run", "a cat"],
    "batch": ["batch", "--input", "in.jsonl", "--out", "o"],
    "eval generate": ["eval", "generate", "wise", "--data", "d", "--out", "o"],
    "demo": ["demo"],
    "judge": ["judge", "--before", "a.png", "--after", "b.png", "--instruction", "i"],
    "reward": ["reward", "--input", "r.jsonl", "--generator", "tiny:", "--judge", "tiny:", "--out", "o"],
    "data build": ["data", "build", "--input", ".", "--out", "o"],
    "data stats": ["data", "stats", "--input", "."],
    "data synth": ["data", "synth", "--role", "planner", "--out", "o"],
    "serve vlm": ["serve", "vlm", "--model", "tiny:planner"],
    "serve generator": ["serve", "generator", "--generator", "tiny:"],
    "prompts check": ["prompts", "check"],
    "prompts download": ["prompts", "download"],
    "eval score": [
        "eval",
        "score",
        "wise",
        "--outputs",
        "o",
        "--data",
        "d",
        "--judge",
        "tiny:judge",
        "--out",
        "o",
    ],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_model_device_from_the_config_file_is_checked_by_every_command(name: str, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", preset="tiny", model={"device": "cuda:7"})
    result = invoke(*COMMANDS[name], "--config", str(config))
    assert isinstance(result.exception, ConfigError), result.output
    assert "config key 'model.device' cuda:7" in str(result.exception)
    assert "no such CUDA device" in str(result.exception)


@pytest.mark.parametrize("name", ["run", "batch", "eval generate", "demo"])
def test_a_spec_from_the_config_file_is_checked_and_named_by_its_key(name: str, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", preset="tiny", critic="nope:x")
    result = invoke(*COMMANDS[name], "--config", str(config))
    assert isinstance(result.exception, ConfigError), result.output
    assert str(result.exception).startswith("config key 'critic' 'nope:x': Unknown backend kind 'nope'")


# 2. prompts.* and remote.* reach the judge of `judge` and of `data build`.
def judge_config(tmp_path: Path, retries: int) -> Path:
    return write_config(
        tmp_path / f"judge{retries}.yaml",
        prompts={"folder": str(custom_templates(tmp_path / "templates")), "verify": False},
        remote={"max_retries": retries, "backoff_base": 0, "backoff_max": 0, "api_key_env": "JUDGE_TEST_KEY"},
    )


def test_judge_uses_the_templates_and_transport_of_the_config(recorder: Recorder, tmp_path: Path) -> None:
    before, after = images(tmp_path)
    args = ["judge", "--before", before, "--after", after, "--instruction", "paint it red"]
    args += ["--judge", f"openai:{recorder.url}#judge"]
    counts = []
    for retries in (0, 2):
        start = len(recorder.posts)
        result = invoke(
            *args, "--config", str(judge_config(tmp_path, retries)), env={"JUDGE_TEST_KEY": "k-123"}
        )
        assert result.exit_code == 1, result.output
        counts.append(len(recorder.posts) - start)
    assert counts[0] >= 1 and counts[1] == 3 * counts[0]
    assert all(MARKER in post["body"] for post in recorder.posts)
    assert {post["auth"] for post in recorder.posts} == {"Bearer k-123"}
    assert {post["path"] for post in recorder.posts} == {"/v1/chat/completions"}


def test_eval_score_judge_uses_the_transport_of_the_config(recorder: Recorder, tmp_path: Path) -> None:
    from tests.conftest import shared_path

    data = shared_path("benchmarks", "wise")
    monkey_env = {
        "JUDGE_TEST_KEY": "k-123",
        "INTERLEAVE_THINKER_EVAL_PROMPTS": str(shared_path("reference", "eval")),
    }
    outputs = tmp_path / "images"
    outputs.mkdir()
    Image.new("RGB", (32, 24), (10, 20, 200)).save(outputs / "1.png")
    counts = []
    for retries in (0, 2):
        start = len(recorder.posts)
        config = write_config(
            tmp_path / f"score{retries}.yaml",
            remote={
                "max_retries": retries,
                "backoff_base": 0,
                "backoff_max": 0,
                "api_key_env": "JUDGE_TEST_KEY",
            },
        )
        result = invoke(
            "eval", "score", "wise", "--outputs", str(outputs), "--data", str(data),
            "--judge", f"openai:{recorder.url}#judge", "--out", str(tmp_path / f"s{retries}"),
            "--judge-attempts", "1", "--config", str(config), env=monkey_env,
        )  # fmt: skip
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        # Every judgement failed (the server answers 500): nothing was scored, which is an error.
        assert result.exit_code == 1, result.output
        said = " ".join(result.output.split())  # the console wraps long lines
        assert "error: no output was scored (1 judgements failed, 999 outputs missing)" in said
        counts.append(len(recorder.posts) - start)
    assert counts == [1, 3]
    assert {post["auth"] for post in recorder.posts} == {"Bearer k-123"}


def test_data_build_judge_uses_the_templates_and_transport_of_the_config(
    recorder: Recorder, tmp_path: Path
) -> None:
    from tests.helpers.runs import make_run

    run = make_run(tmp_path / "runs", "r", [[(False, 3.0), (True, 8.0)]])
    (run / "judge_scores.json").unlink()  # unscored: the judge is asked
    counts = []
    for retries in (0, 2):
        start = len(recorder.posts)
        config = judge_config(tmp_path, retries)
        result = invoke(
            "data", "build", "--input", str(tmp_path / "runs"), "--out", str(tmp_path / f"o{retries}"),
            "--judge", f"openai:{recorder.url}#judge", "--config", str(config), "--no-trl",
            env={"JUDGE_TEST_KEY": "k-9"},
        )  # fmt: skip
        assert result.exit_code == 1 and "judgement(s) failed" in result.output, result.output
        counts.append(len(recorder.posts) - start)
    assert counts[0] >= 1 and counts[1] == 3 * counts[0]
    assert all(MARKER in post["body"] for post in recorder.posts)


# 3. prompts.* reach the data built from templates.
def test_data_synth_and_build_fill_the_templates_of_the_config(tmp_path: Path) -> None:
    from tests.helpers.runs import make_run

    config = write_config(
        tmp_path / "c.yaml", prompts={"folder": str(custom_templates(tmp_path / "t")), "verify": False}
    )
    synth = invoke("data", "synth", "--role", "planner", "--n", "2", "--out", str(tmp_path / "s"), "--config", str(config))  # fmt: skip
    assert synth.exit_code == 0, synth.output
    assert "custom templates" in synth.output
    assert MARKER in (tmp_path / "s" / "planner_sft.json").read_text()
    plain = invoke("data", "synth", "--role", "planner", "--n", "2", "--out", str(tmp_path / "p"))
    assert plain.exit_code == 0 and MARKER not in (tmp_path / "p" / "planner_sft.json").read_text()

    make_run(tmp_path / "runs", "r", [[(True, 9.0)], [(True, 9.0)]])
    built = invoke("data", "build", "--input", str(tmp_path / "runs"), "--out", str(tmp_path / "b"), "--no-trl", "--config", str(config))  # fmt: skip
    assert built.exit_code == 0, built.output
    outputs = "".join(p.read_text() for p in (tmp_path / "b").glob("*.json*"))
    assert MARKER in outputs


def test_reward_builds_its_backends_from_the_config(recorder: Recorder, tmp_path: Path) -> None:
    args = ["reward", "--input", str(rollout(tmp_path)), "--generator", f"http:{recorder.url}"]
    args += ["--judge", f"openai:{recorder.url}#j", "--out", str(tmp_path / "out.jsonl")]
    keyed = write_config(tmp_path / "k.yaml", remote={"api_key_env": "REWARD_TEST_UNSET_KEY"})
    result = invoke(*args, "--config", str(keyed))
    assert isinstance(result.exception, ConfigError), result.output
    assert "remote.api_key_env names REWARD_TEST_UNSET_KEY" in str(result.exception)
    folder = write_config(tmp_path / "f.yaml", prompts={"folder": str(tmp_path / "no-templates")})
    result = invoke(*args, "--config", str(folder))
    assert isinstance(result.exception, TemplateError), result.output
    assert "no-templates does not exist" in str(result.exception)


# 5. serve generator places its workers on model.device; prompts check looks in prompts.folder.
def test_serve_generator_workers_follow_model_device() -> None:
    from interleave_thinker.cli.serve_generator import _devices

    assert _devices("cuda:1", 2) == ("cuda:1", "cuda:1")
    assert _devices("cpu", 3) == ("cpu", "cpu", "cpu")


def test_serve_generator_workers_load_with_the_dtype_of_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interleave_thinker.backends.specs as specs
    import interleave_thinker.server.generator as service
    from interleave_thinker.server.generator.worker import load_backend

    served: list[Any] = []
    monkeypatch.setattr(service, "serve", served.append)
    config = write_config(tmp_path / "c.yaml", model={"device": "cpu", "dtype": "bfloat16"})
    result = invoke("serve", "generator", "--generator", "tiny:", "--workers", "2", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert [(s.devices, s.dtype) for s in served] == [(("cpu", "cpu"), "bfloat16")]

    loaded: list[Any] = []
    monkeypatch.setattr(specs, "load_image_backend", lambda spec, options: loaded.append((spec, options)))
    load_backend("tiny:", "cpu", None, served[0].dtype)
    assert [(spec, o.device, o.dtype) for spec, o in loaded] == [("tiny:", "cpu", "bfloat16")]


def test_prompts_check_looks_in_the_folder_of_the_config(tmp_path: Path) -> None:
    folder = custom_templates(tmp_path / "t")
    config = write_config(tmp_path / "c.yaml", prompts={"folder": str(folder)})
    result = invoke("prompts", "check", "--config", str(config))
    assert result.exit_code == 1  # edited templates: digests differ
    assert str(folder / "critic.txt") in result.output and "DIGEST MISMATCH" in result.output


# 6. GRPO: the reward judge and generator get reward.device, remote.* and prompts.* of the run config.
def test_grpo_reward_backends_follow_the_run_config(
    recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interleave_thinker.testing.scripted import ScriptedImageBackend
    from interleave_thinker.train.grpo.config import GRPORunConfig
    from interleave_thinker.train.grpo.trainer import reward_backend_options, reward_functions

    data = {
        "output_dir": str(tmp_path / "out"),
        "model": {"name_or_path": "tiny"},
        "data": {"synthetic": 2},
        "training": {"per_device_train_batch_size": 2, "num_generations": 2},
        "reward": {
            "judge": f"openai:{recorder.url}#j",
            "generator": f"http:{recorder.url}",
            "device": "cuda:1",
        },
        "prompts": {"folder": str(custom_templates(tmp_path / "t")), "verify": False},
        "remote": {"max_retries": 1, "backoff_base": 0, "api_key_env": "GRPO_TEST_KEY"},
    }
    config = GRPORunConfig.model_validate(data)
    options = reward_backend_options(config)
    assert (options.device, options.remote.max_retries) == ("cuda:1", 1)
    with pytest.raises(ConfigError, match="GRPO_TEST_KEY"):
        reward_functions(config, "critic")  # the backends are built with remote.api_key_env
    monkeypatch.setenv("GRPO_TEST_KEY", "g-1")
    _, _, closers = reward_functions(config, "critic", generator=ScriptedImageBackend())
    try:
        judge = closers[0].judge
        assert (judge.templates.origin, judge.templates.kind) == (str(tmp_path / "t"), "custom")
        before, after = images(tmp_path)
        with Image.open(before) as b, Image.open(after) as a:
            judge.judge(b.convert("RGB"), a.convert("RGB"), "paint it red")
    finally:
        closers[0].close()
    assert len(recorder.posts) >= 2 and len(recorder.posts) % 2 == 0  # 1 + remote.max_retries per call
    assert all(MARKER in p["body"] and p["auth"] == "Bearer g-1" for p in recorder.posts)


def test_old_output_dir_flag_still_works_with_a_note(tmp_path: Path) -> None:
    config = write_config(tmp_path / "g.yaml", output_dir="x")
    result = invoke("train", "grpo", "--config", str(config), "--output-dir", str(tmp_path / "o"))
    assert "note: --output-dir is deprecated; use --out." in result.output
    assert isinstance(result.exception, ConfigError)  # the config lacks model: and data:


def test_old_from_flag_still_works_with_a_note(tmp_path: Path) -> None:
    from tests.helpers.runs import make_run

    make_run(tmp_path / "runs", "r", [[(True, 9.0)]])
    old = invoke("data", "stats", "--from", str(tmp_path / "runs"))
    new = invoke("data", "stats", "--input", str(tmp_path / "runs"))
    assert old.exit_code == 0 and new.exit_code == 0, old.output
    assert old.output == "note: --from is deprecated; use --input.\n" + new.output
    missing = invoke("data", "stats")
    assert "Missing option --input" in str(missing.exception)
