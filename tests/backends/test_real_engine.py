"""The pipeline through a real OpenAI-compatible engine writes the same trace as the local run (issue 29).

The engine is ``transformers serve`` (the server in the pinned transformers, ``pip install -e '.[serving]'``)
over the format-trained tiny planner and critic, one process each on 127.0.0.1; then the same through our
own ``serve vlm``. ``transformers serve`` always splits a Qwen model's reply into ``reasoning_content``
(the text of its ``<think>`` block) and ``content`` (what follows), as vLLM and SGLang do with
``--reasoning-parser qwen3``; ``serve vlm`` sends the reply inline. Both must give the local
``transformers:`` run's trace: raw replies with their reasoning, plans, verdicts, images. Decoding is
greedy on every side (the tiny preset's first calls, and retries set to temperature 0 here).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.agents.planner import planner_messages
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.core.prompt_store import TemplateStore
from interleave_thinker.tiny.kind import tiny_vlm_folder
from tests.helpers.common import cli_command, tiny_dir
from tests.helpers.common import stable_across_backends as stable
from tests.helpers.served import Engine, stop_all

pytestmark = pytest.mark.slow

PROMPT = "How to draw a cat step by step?"
READY_S = 120.0
ROLES = ("planner", "critic")
TINY_DIR = tiny_dir()
"""The tiny models' cache, as tests/conftest.py keeps it for every test."""


def transformers_serve(folder: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        str(folder),
        "--host",
        "127.0.0.1",
        "--device",
        "cpu",
        "--log-level",
        "warning",
    ]


def serve_vlm(folder: Path) -> list[str]:
    served = ("--model", f"transformers:{folder}", "--served-name", str(folder))
    return cli_command("serve", "vlm", *served, "--log-level", "warning")


ENGINES = {"transformers-serve": transformers_serve, "serve-vlm": serve_vlm}


def engine_unavailable(engine: str) -> str | None:
    if engine != "transformers-serve":
        return None
    from transformers.utils.import_utils import is_serve_available

    if is_serve_available():
        return None
    return (
        "transformers serve cannot start: its serving dependencies (fastapi, uvicorn, pydantic, openai) "
        "are not installed; pip install -e '.[serving]'"
    )


def run(overrides: dict[str, Any], out: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The trace of one tiny-preset run, and the SHA-256 of each image it wrote."""
    config = PipelineConfig.resolve(
        preset="tiny", overrides={**overrides, "agents": {"retry_temperature": 0.0}}, environ={}
    )
    with Pipeline.from_config(config) as pipe:
        pipe(PROMPT, out_dir=out)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "images").iterdir())}
    return dict(json.loads((out / "trace.json").read_text())), digests


def reasonings(trace: dict[str, Any]) -> list[str | None]:
    verdicts = [a["verdict"] for s in trace["steps"] for a in s["attempts"] if a["critic_called"]]
    return [trace["planner"]["plan"]["reasoning"], *(v["reasoning"] for v in verdicts)]


@dataclass
class Setup:
    folders: dict[str, Path]
    servers: dict[str, dict[str, Engine]]
    """Per engine that can run here, its planner and critic servers (started, maybe not ready yet)."""
    trace: dict[str, Any]
    images: dict[str, str]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Every server started first, then the local ``transformers:`` run while they load (once for both
    engines, in a home of its own as every test has); the servers are stopped when the module ends."""
    logs = tmp_path_factory.mktemp("logs")
    with pytest.MonkeyPatch.context() as env, ExitStack() as stack:
        env.setenv("INTERLEAVE_THINKER_HOME", str(tmp_path_factory.mktemp("home")))
        env.setenv("INTERLEAVE_THINKER_TINY_DIR", TINY_DIR)
        env.setenv("INTERLEAVE_THINKER_OFFLINE", "1")
        env.setenv("HF_HUB_OFFLINE", "1")
        env.delenv("INTERLEAVE_THINKER_PROMPTS", raising=False)
        env.delenv("INTERLEAVE_THINKER_PROMPTS_URL", raising=False)
        folders = {role: tiny_vlm_folder(f"{role}-sft") for role in ROLES}
        servers: dict[str, dict[str, Engine]] = {}
        started: list[Engine] = []
        stack.callback(stop_all, started)
        for engine in sorted(e for e in ENGINES if engine_unavailable(e) is None):
            for role in ROLES:
                server = Engine(
                    f"{engine} ({role})", ENGINES[engine](folders[role]), logs / f"{engine}-{role}.log"
                )
                started.append(server)
                servers.setdefault(engine, {})[role] = server
        trace, images = run({}, tmp_path_factory.mktemp("local"))
        assert trace["planner"]["raw_replies"][0].startswith("<think>\n") and None not in reasonings(trace)
        assert len(trace["steps"]) >= 2 and len(images) == len(trace["steps"])
        yield Setup(folders, servers, trace, images)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_real_engine_gives_the_local_trace(engine: str, setup: Setup, tmp_path: Path) -> None:
    reason = engine_unavailable(engine)
    if reason:
        pytest.skip(reason)
    servers, folders = setup.servers[engine], setup.folders
    for server in servers.values():
        server.wait_ready(skip_if_it_exits=engine == "transformers-serve", within=READY_S)
    if engine == "transformers-serve":
        check_the_engine_splits_the_reasoning(servers["planner"].url, folders["planner"])
    specs = {role: f"openai:{servers[role].url}/v1#{folders[role]}" for role in ROLES}
    served, images = run(specs, tmp_path / "served")

    assert served["backends"]["planner"] == specs["planner"]
    assert served["planner"]["raw_replies"] == setup.trace["planner"]["raw_replies"]  # the think block too
    assert reasonings(served) == reasonings(setup.trace)
    assert stable(served) == stable(setup.trace)  # raw replies with their reasoning, plan, verdicts, seeds
    assert images == setup.images


def check_the_engine_splits_the_reasoning(url: str, folder: Path) -> None:
    """What the engine really returns for the planner's first call: the think block split out, so the
    served trace equals the local one only because the ``openai:`` backend puts it back."""
    messages = planner_messages(TemplateStore().load(), PROMPT, [])
    with OpenAIVLMBackend(f"{url}/v1", str(folder)) as backend:
        body = {"model": str(folder), "messages": backend.to_openai_messages(messages), "max_tokens": 256}
    reply = httpx.post(f"{url}/v1/chat/completions", json={**body, "temperature": 0.0}, timeout=120).json()
    message = reply["choices"][0]["message"]
    assert message["content"].startswith("<answer>") and "<think>" not in message["content"], message
    assert isinstance(message.get("reasoning_content"), str) and message["reasoning_content"].strip(), message
