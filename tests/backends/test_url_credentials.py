"""Credentials written in a backend URL (``http://user:PASSWORD@host``) are sent (as HTTP Basic auth),
and never written: not to trace.json, index.html, document.md, a batch's files, stderr or stdout, nor to
an evaluation's run.json and summary.json. Real `run` and `batch` subprocesses against servers on
127.0.0.1 that refuse a request without the credentials."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from interleave_thinker.backends.remote import EndpointPool
from interleave_thinker.backends.secrets import split_credentials
from interleave_thinker.core.redact import redact_credentials, redact_spec
from interleave_thinker.eval.scoring import judge_metadata
from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.server import Handle, LocalServer, Reply, Request
from tests.helpers.common import run_cli

PASSWORD = "PW-s3cret-9f1c"
BASIC = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


def requiring_basic_auth(handle: Handle, seen: list[str]) -> Handle:
    """``handle``, behind HTTP Basic auth with alice's credentials (401 otherwise)."""

    def guarded(request: Request) -> Reply | None:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != BASIC:
            return Reply(401, {"error": {"message": "credentials required"}})
        return handle(request)

    return guarded


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return run_cli("", *args, timeout=300, env={"OPENAI_API_KEY": "sk-not-sent"})


def leaks(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and PASSWORD.encode() in p.read_bytes()]


def test_url_credentials_are_sent_and_never_written(tmp_path: Path) -> None:
    seen: list[str] = []
    chat = requiring_basic_auth(scripted_models.handler("chat", scripted_models.State()), seen)
    edit = requiring_basic_auth(scripted_models.handler("edit", scripted_models.State()), seen)
    with LocalServer(chat) as planner, LocalServer(edit) as generator:
        vlm = f"openai:{with_credentials(planner.url)}/v1#scripted"
        specs = ["--preset", "tiny", "--planner", vlm, "--critic", vlm]
        good = ["--generator", f"http:{with_credentials(generator.url)}"]
        down = ["--generator", f"http:alice:{PASSWORD}@127.0.0.1:9", "--config", str(tmp_path / "fast.yaml")]
        (tmp_path / "fast.yaml").write_text("remote:\n  max_retries: 0\n  timeout: 2\n")
        (tmp_path / "in.jsonl").write_text('{"id": "a", "prompt": "draw a cat"}\n')
        runs = {
            "run": cli(["run", "draw a cat", "--out", str(tmp_path / "run"), *specs, *good]),
            "batch": cli(
                [
                    "batch",
                    "--input",
                    str(tmp_path / "in.jsonl"),
                    "--out",
                    str(tmp_path / "batch"),
                    *specs,
                    *good,
                ]
            ),
            "failed": cli(["run", "draw a cat", "--out", str(tmp_path / "failed"), *specs, *down]),
        }
    assert runs["run"].returncode == 0, runs["run"].stderr[-2000:]
    assert runs["batch"].returncode == 0, runs["batch"].stderr[-2000:]
    trace = json.loads((tmp_path / "batch" / "requests" / "a" / "trace.json").read_text())
    assert trace["status"] == "succeeded"
    assert trace["backends"]["generator"] == f"http:http://***@127.0.0.1:{generator.port}"
    assert set(seen) == {BASIC}  # every request carried the credentials, on both paths (run and batch)
    failed = json.loads((tmp_path / "failed" / "trace.json").read_text())
    assert failed["status"] == "failed" and "127.0.0.1:9" in json.dumps(failed)
    for name, done in runs.items():
        assert PASSWORD not in done.stdout + done.stderr, name
    assert leaks(tmp_path) == []


def test_a_judge_spec_is_recorded_without_its_credentials() -> None:
    meta = judge_metadata("wise", f"openai:https://alice:{PASSWORD}@judge.example/v1#gpt-4o", "gpt-4o")
    assert meta["spec"] == "openai:https://***@judge.example/v1#gpt-4o"


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        (f"openai:http://alice:{PASSWORD}@h:8000/v1#m", "openai:http://***@h:8000/v1#m"),
        (f"vllm-omni:alice:{PASSWORD}@gpu1:8000,gpu2:8000", "vllm-omni:***@gpu1:8000,gpu2:8000"),
        (f"http:{PASSWORD}@gpu1:8011#klein", "http:***@gpu1:8011#klein"),
        ("http:@hosts.txt#klein", "http:@hosts.txt#klein"),
        ("tiny:planner", "tiny:planner"),
    ],
)
def test_specs_are_shown_without_credentials(spec: str, shown: str) -> None:
    assert redact_spec(spec) == shown
    assert PASSWORD not in redact_credentials(f"error: {spec} failed")


def test_the_pool_takes_credentials_out_of_its_urls() -> None:
    pool = EndpointPool(
        [f"http://alice:{PASSWORD}@h:1/v1", "http://h:2"], slots={f"http://alice:{PASSWORD}@h:1/v1": 2}
    )
    assert pool.urls == ["http://h:1/v1", "http://h:2"]
    assert pool.credentials == {"http://h:1/v1": BASIC}
    assert pool.slots == {"http://h:1/v1": 2}
    assert split_credentials("http://h:2") == ("http://h:2", None)
