"""One table of input errors for both servers (``serve generator``, ``serve vlm``) over their real tiny
models: what the model's own processor refuses is the client's error, a 4xx with an error body clients
read (OpenAI's shape; the authors' on ``/edit``), never a 500 that clients retry. Each server's test
module runs its rows against the server it already starts."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
from PIL import Image

OPENAI = "openai"
EDIT = "edit"
STREAM = "stream"
"""A streamed reply has started (200) when the model's processor runs: its error event carries the 4xx."""


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def edits(*sizes: tuple[int, int]) -> dict[str, Any]:
    files = [("image", (f"{i}.png", png(*size), "image/png")) for i, size in enumerate(sizes)]
    return {"data": {"prompt": "a cat", "size": "64x64", "num_inference_steps": "1"}, "files": files}


def edit(width: int, height: int) -> dict[str, Any]:
    image = base64.b64encode(png(width, height)).decode()
    return {"json": {"prompt": "a cat", "image": image, "width": 64, "height": 64, "num_inference_step": 1}}


def chat(image: tuple[int, int] | None = None, **fields: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "Describe it."}]
    if image is not None:
        url = "data:image/png;base64," + base64.b64encode(png(*image)).decode()
        content.append({"type": "image_url", "image_url": {"url": url}})
    return {"json": {"messages": [{"role": "user", "content": content}], "max_tokens": 3, **fields}}


def raw_chat(temperature: str) -> dict[str, Any]:
    body = (
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": '
        + temperature
        + "}"
    )
    return {"content": body, "headers": {"Content-Type": "application/json"}}


TABLE: list[tuple[str, str, str, dict[str, Any], int, str]] = [
    # server, route, error shape, request, status, what the message says
    ("generator", "/v1/images/edits", OPENAI, edits((32, 32)), 400, "at least 64px"),
    ("generator", "/v1/images/edits", OPENAI, edits((64, 64), (63, 80)), 400, "reference image 1"),
    ("generator", "/v1/images/edits", OPENAI, edits((64, 1024)), 400, "Aspect ratio too extreme"),
    ("generator", "/edit", EDIT, edit(40, 40), 400, "at least 64px"),
    (
        "vlm",
        "/v1/chat/completions",
        OPENAI,
        chat(image=(1, 400)),
        400,
        "aspect ratio must be smaller than 200",
    ),
    ("vlm", "/v1/chat/completions", STREAM, chat(image=(400, 1), stream=True), 400, "aspect ratio"),
    (
        "vlm",
        "/v1/chat/completions",
        OPENAI,
        raw_chat("NaN"),
        400,
        "temperature: Input should be a finite number",
    ),
    ("vlm", "/v1/chat/completions", OPENAI, raw_chat("Infinity"), 400, "temperature"),
    # not an error: vLLM samples at 0.01 below it (the softmax of logits / 1e-300 is NaN)
    ("vlm", "/v1/chat/completions", OPENAI, chat(temperature=1e-300), 200, ""),
]


def rows(server: str) -> list[Any]:
    """The rows of ``server``, as ``pytest.param`` arguments with readable ids."""
    import pytest

    return [
        pytest.param(*row[1:], id=f"{row[1]}-{index}") for index, row in enumerate(TABLE) if row[0] == server
    ]


def assert_refused(reply: httpx.Response, shape: str, status: int, says: str) -> None:
    """``reply`` is ``status`` with an error body of ``shape`` saying ``says`` (200: a normal reply)."""
    if status == 200:
        assert reply.status_code == 200, reply.text[:300]
        assert isinstance(reply.json()["choices"][0]["message"]["content"], str)
        return
    if shape == STREAM:
        events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", reply.text[:300]
        error = json.loads(events[-2])["error"]
        assert (error["code"], error["type"]) == (status, "invalid_request_error"), error
        assert says in error["message"], error
        return
    assert reply.status_code == status, reply.text[:300]
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    if shape == OPENAI:  # OpenAI's error shape, which clients read (and do not retry on a 4xx)
        assert (body["error"]["code"], body["error"]["type"]) == (status, "invalid_request_error"), body
        assert says in body["error"]["message"], body
    else:  # the authors' /edit shape
        assert body["success"] is False and says in body["error"], body
