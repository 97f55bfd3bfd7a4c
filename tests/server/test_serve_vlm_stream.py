"""`serve vlm` with ``stream: true`` and ``--api-key-env``, reached by the official ``openai`` SDK over HTTP
on 127.0.0.1: the streamed deltas add up to the non-streamed reply, usage comes last with
``include_usage``, ``[DONE]`` ends every stream, and a key makes every route but /health a 401."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, Unpack

import httpx
import openai
import pytest

from interleave_thinker.backends.protocols import ChatOptions, Message, VLMBatchMixin
from interleave_thinker.backends.specs import load_vlm_backend
from interleave_thinker.core.errors import BackendError
from interleave_thinker.server.vlm_service import VLMLimits, create_app
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.doubles.stoppable import ModelBackend
from tests.helpers.served import post_by_hand, wait_until_generating

REPLY = "Step 1: sketch the kite.\nStep 2: colour it red."
KEY = "s3cret-token"


class WordTokenizer:
    """A tokenizer with the transformers call shape, one token per word, so the server reports usage."""

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": list(range(len(text.split())))}


class ScriptedBackend(VLMBatchMixin):
    """Answers ``REPLY`` in one call (no ``model.generate``: the server streams it as one delta), or fails."""

    def __init__(self, *, fail: bool = False) -> None:
        self.name = "scripted"
        self.tokenizer = WordTokenizer()
        self.fail = fail
        self.calls = 0

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        self.calls += 1
        if self.fail:
            raise BackendError("scripted: generation failed: out of memory")
        return REPLY


def sdk(server: AppServer, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


def streamed(client: openai.OpenAI, **extra: Any) -> list[Any]:
    stream = client.chat.completions.create(
        model="rec", messages=[{"role": "user", "content": "plan a kite"}], stream=True, **extra
    )
    return list(stream)


def text_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def raw_events(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[str]]:
    """The ``data:`` payloads of a streamed reply, read with plain httpx."""
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    return response, [line.removeprefix("data: ") for line in lines]


@pytest.fixture
def scripted() -> Iterator[tuple[ScriptedBackend, AppServer]]:
    backend = ScriptedBackend()
    with AppServer(create_app(backend, "rec")) as server:
        yield backend, server


def test_sdk_stream_equals_the_reply_with_role_finish_usage_and_done(
    scripted: tuple[ScriptedBackend, AppServer],
) -> None:
    _, server = scripted
    with sdk(server) as client:
        whole = client.chat.completions.create(
            model="rec", messages=[{"role": "user", "content": "plan a kite"}]
        )
        chunks = streamed(client, stream_options={"include_usage": True})
    assert whole.choices[0].message.content == REPLY
    assert text_of(chunks) == REPLY
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert {c.model for c in chunks} == {"rec"}
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishing[-1] == "stop" and set(finishing[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])


def test_wire_format_is_sse_ending_in_done(scripted: tuple[ScriptedBackend, AppServer]) -> None:
    _, server = scripted
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    response, events = raw_events(server.url, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": REPLY},
        {},
    ]
    assert all(set(c) == {"id", "object", "created", "model", "choices"} for c in chunks)  # no usage asked


def test_errors_before_the_stream_are_json_4xx(scripted: tuple[ScriptedBackend, AppServer]) -> None:
    backend, server = scripted
    with sdk(server) as client, pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(
            model="other", messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert "The model `other` does not exist" in missing.value.message
    bad = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}},
    )
    assert bad.status_code == 400
    assert bad.headers["content-type"] == "application/json"
    assert "stream_options: only allowed with stream=true" in bad.json()["error"]["message"]
    assert backend.calls == 0


def test_a_failure_after_the_start_is_an_error_event_then_done() -> None:
    with AppServer(create_app(ScriptedBackend(fail=True), "rec")) as server:
        response, events = raw_events(
            server.url, {"messages": [{"role": "user", "content": "x"}], "stream": True}
        )
        assert response.status_code == 200
        assert json.loads(events[0])["choices"][0]["delta"]["role"] == "assistant"
        assert json.loads(events[1]) == {
            "error": {
                "message": "scripted: generation failed: out of memory",
                "type": "server_error",
                "code": 500,
            }
        }
        assert events[2:] == ["[DONE]"]
        with sdk(server) as client, pytest.raises(openai.APIError) as info:
            streamed(client)
        assert "out of memory" in info.value.message


def test_a_client_leaving_mid_stream_stops_the_generation() -> None:
    backend = ModelBackend()
    with AppServer(create_app(backend, "rec", VLMLimits(max_tokens=100_000))) as server:
        body = json.dumps(
            {"messages": [{"role": "user", "content": "go"}], "max_tokens": 100_000, "stream": True}
        ).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.settimeout(30)
            post_by_hand(raw, body)
            received = b""
            while b"chat.completion.chunk" not in received:  # the stream has started (headers first)
                data = raw.recv(4096)
                assert data, "the server closed the stream"
                received += data
            wait_until_generating(backend.model)
        assert backend.model.finished.wait(60), "the generation went on after its client left"
        assert backend.model.steps < 100_000
        assert httpx.get(f"{server.url}/health", timeout=30).json()["cancelled"] == 1


@pytest.mark.slow
def test_tiny_planner_streams_tokens_that_add_up_to_the_reply() -> None:
    backend = load_vlm_backend("tiny:planner")
    with AppServer(create_app(backend, "rec")) as server, sdk(server) as client:
        messages: Any = [{"role": "user", "content": "Plan three steps for a red kite over a beach."}]
        whole = client.chat.completions.create(model="rec", messages=messages, max_tokens=16, temperature=0)
        stream = client.chat.completions.create(
            model="rec",
            messages=messages,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert whole.choices[0].message.content
    assert "".join(deltas) == whole.choices[0].message.content
    assert len(deltas) > 1  # real tokens, not one delta at the end
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()


# -- --api-key-env -------------------------------------------------------------------------------


@pytest.fixture
def keyed() -> Iterator[tuple[ScriptedBackend, AppServer]]:
    backend = ScriptedBackend()
    with AppServer(create_app(backend, "rec", api_key=KEY)) as server:
        yield backend, server


def test_without_the_bearer_every_route_but_health_is_a_401(keyed: tuple[ScriptedBackend, AppServer]) -> None:
    backend, server = keyed
    for key, stream in (("wrong", True), (KEY.upper(), False)):
        with sdk(server, key) as client, pytest.raises(openai.AuthenticationError) as info:
            client.chat.completions.create(
                model="rec", messages=[{"role": "user", "content": "x"}], stream=stream
            )
        assert info.value.status_code == 401
    refused = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": []})  # no header, bad body
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json() == {
        "error": {
            "message": "Missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the "
            "service reads from its --api-key-env variable (or VLLM_API_KEY).",
            "type": "authentication_error",
            "code": 401,
        }
    }
    assert KEY not in refused.text
    assert httpx.get(f"{server.url}/v1/models").status_code == 401
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    assert backend.calls == 0
    with sdk(server, KEY) as client:
        assert text_of(streamed(client)) == REPLY
    assert backend.calls == 1


def test_cli_reads_the_key_from_the_environment_only() -> None:
    env = {**os.environ, "COLUMNS": "300", "IT_EMPTY_KEY": ""}
    command = [sys.executable, "-m", "interleave_thinker", "serve", "vlm"]
    empty = subprocess.run(
        [*command, "--model", "tiny:planner", "--api-key-env", "IT_EMPTY_KEY"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert empty.returncode == 2
    assert "--api-key-env IT_EMPTY_KEY: the environment variable IT_EMPTY_KEY is empty" in empty.stderr
    shown = subprocess.run([*command, "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert "--api-key-env" in shown.stdout
    assert "vLLM's flag, refused here" in shown.stdout  # the flag is listed, and says it takes no value


@pytest.mark.parametrize(
    "service", [["vlm", "--model", "tiny:planner"], ["generator", "--generator", "tiny:"]]
)
def test_vllms_api_key_flag_is_refused_without_repeating_the_value(service: list[str]) -> None:
    """``--api-key VALUE`` (vLLM's habit) exits 2 before loading anything, names the two ways that keep the
    key out of ``ps`` and shell history, and never prints the value it was given."""
    env = {**os.environ, "COLUMNS": "300"}
    command = [sys.executable, "-m", "interleave_thinker", "serve", *service, "--api-key", "s3cr3t-VALUE"]
    refused = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "--api-key takes no value here" in refused.stderr
    assert "export VLLM_API_KEY=<token>" in refused.stderr and "--api-key-env NAME" in refused.stderr
    assert "s3cr3t-VALUE" not in refused.stdout + refused.stderr


def test_vllm_api_key_variable_is_read_as_vllm_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--api-key-env``, ``VLLM_API_KEY`` is the key (vLLM's own fallback); the named variable wins."""
    from interleave_thinker.server.auth import api_key_from_env

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert api_key_from_env(None) is None
    monkeypatch.setenv("VLLM_API_KEY", " from-vllm-var ")
    monkeypatch.setenv("IT_NAMED_KEY", "from-named-var")
    assert api_key_from_env(None) == "from-vllm-var"
    assert api_key_from_env("IT_NAMED_KEY") == "from-named-var"
