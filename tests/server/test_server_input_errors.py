"""Our servers answer input errors with a 4xx and a JSON error body, as OpenAI does, never a 500 (which
clients retry): ``serve generator``'s ``/edit`` and ``/v1/images/*`` for a lone-surrogate prompt, a size
the generator cannot take, or ``n: true``; ``serve vlm`` for a lone surrogate. The apps are the real ones,
served over HTTP on 127.0.0.1 (the generator's workers are not started: refusals come before them)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from interleave_thinker.backends.protocols import Message
from interleave_thinker.server.generator.app import create_app as generator_app
from interleave_thinker.server.generator.pool import WorkerPool
from interleave_thinker.server.generator.settings import ServiceSettings
from interleave_thinker.server.vlm_service import create_app as vlm_app
from interleave_thinker.testing.doubles.asgi import AppServer

SURROGATE_JSON = '"a cat \\ud83d"'
"""A prompt cut inside an emoji, as JSON carries it (an escaped lone surrogate)."""


@pytest.fixture(scope="module")
def generator() -> Iterator[httpx.Client]:
    settings = ServiceSettings("tiny:generator")  # its port is unused: AppServer binds its own
    server = AppServer(generator_app(settings, WorkerPool(settings)))
    with server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def png_b64() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 20, 30)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def raw_json(**fields: str) -> bytes:
    """A JSON object whose values are given as JSON text (so an escaped surrogate stays escaped)."""
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode()


def assert_json_4xx(reply: httpx.Response, status: int, says: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text[:300]
    assert reply.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = reply.json()
    error = body["error"]
    message = error if isinstance(error, str) else error["message"]
    assert says in message, message
    message.encode("utf-8")
    return body


@pytest.mark.parametrize("route", ["/edit", "/v1/images/generations"])
def test_a_lone_surrogate_prompt_is_a_400(generator: httpx.Client, route: str) -> None:
    reply = generator.post(
        route, content=raw_json(prompt=SURROGATE_JSON), headers={"Content-Type": "application/json"}
    )
    assert_json_4xx(reply, 400, "'prompt' holds a lone surrogate (U+D83D at character 6)")


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/edit", {"prompt": "a cat", "width": 1, "height": 1}),
        ("/edit", {"prompt": "a cat", "width": 8, "height": 64}),
        ("/edit", {"prompt": "a cat", "image": "<png>"}),  # a 32x32 input image: the size is kept
        ("/v1/images/generations", {"prompt": "a cat", "size": "1x1"}),
        ("/v1/images/generations", {"prompt": "a cat", "size": "15x1024"}),
    ],
)
def test_sizes_the_generator_cannot_take_are_a_400(
    generator: httpx.Client, route: str, body: dict[str, Any]
) -> None:
    if body.get("image") == "<png>":
        body = {**body, "image": png_b64(), "width": 8, "height": 8}
    reply = generator.post(route, json=body)
    assert_json_4xx(reply, 400, "sides >= 16")


@pytest.mark.parametrize("value", ["true", "false", "2", "1.0"])
def test_n_other_than_the_integer_1_is_a_400(generator: httpx.Client, value: str) -> None:
    body = raw_json(prompt='"a cat"', n=value, size='"64x64"')
    reply = generator.post(
        "/v1/images/generations", content=body, headers={"Content-Type": "application/json"}
    )
    assert_json_4xx(reply, 400, "'n'")


def test_a_surrogate_model_name_is_answered_in_json(generator: httpx.Client) -> None:
    body = raw_json(prompt='"a cat"', model='"x\\udc00"')
    reply = generator.post(
        "/v1/images/generations", content=body, headers={"Content-Type": "application/json"}
    )
    assert_json_4xx(reply, 400, "Model mismatch")


class TokenizingBackend:
    """Chats like a local model: it tokenizes the prompt first (UTF-8), as every tokenizer must."""

    name = "tokenizing"

    def chat(self, messages: list[Message], *, max_new_tokens: int = 4096, temperature: float = 0.0) -> str:
        text = "".join(p["text"] for m in messages for p in m["content"] if p["type"] == "text")
        return f"{len(text.encode('utf-8'))} bytes"

    def chat_batch(self, conversations: list[list[Message]], **kwargs: Any) -> list[str]:
        return [self.chat(c, **kwargs) for c in conversations]


@pytest.fixture(scope="module")
def vlm() -> Iterator[httpx.Client]:
    server = AppServer(vlm_app(TokenizingBackend(), "tokenizing"))  # type: ignore[arg-type]
    with server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.mark.parametrize(
    "content",
    [SURROGATE_JSON, '[{"type": "text", "text": "fine"}, {"type": "text", "text": ' + SURROGATE_JSON + "}]"],
)
def test_serve_vlm_answers_a_lone_surrogate_with_a_json_400(vlm: httpx.Client, content: str) -> None:
    body = '{"messages": [{"role": "user", "content": ' + content + "}]}"
    reply = vlm.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert_json_4xx(reply, 400, "messages[0].content: a lone surrogate (U+D83D")


def test_serve_vlm_answers_a_surrogate_model_name_in_json(vlm: httpx.Client) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]})[:-1] + ', "model": "x\\udc00"}'
    reply = vlm.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert_json_4xx(reply, 404, "does not exist")


def test_serve_vlm_still_answers_good_text(vlm: httpx.Client) -> None:
    reply = vlm.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a cat 🐈"}]})
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == "10 bytes"
