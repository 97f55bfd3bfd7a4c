"""A stand-in for the OpenAI Images API on 127.0.0.1, speaking its real wire format.

From the OpenAI API reference and ``openai-python`` (``ImageGenerateParams`` / ``ImageEditParams`` /
``ImagesResponse``): JSON for ``/images/generations``, ``multipart/form-data`` for ``/images/edits``
(parsed with the standard library's MIME parser), base64 PNGs in ``data[0].b64_json`` (or a ``url`` to
fetch), errors as ``{"error": {"message", "type", "param", "code"}}``, and a bearer key. A generation is
a flat colour derived from the prompt; an "edit" is the inverted input at the asked size. Several input
images come as ``image[]`` parts (``openai-python``'s list form, 16 at most); each request keeps its
image parts in order (``Received.images``), and an edit inverts the first.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from PIL import Image, ImageChops

from interleave_thinker.testing.doubles.generator import png_b64
from interleave_thinker.testing.doubles.server import Handle, LocalServer, Reply, Request

GPT_IMAGE_SIZES = {"1024x1024", "1536x1024", "1024x1536", "auto"}
MAX_IMAGES = 16
"""GPT image models take up to 16 input images on ``/images/edits``."""


def colour_of(prompt: str) -> tuple[int, int, int]:
    """A colour derived from the prompt, so tests can tell which prompt produced an image."""
    return (len(prompt) * 7 % 256, 40, 200)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    json: dict[str, Any] | None = None
    form: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str | None, str, bytes]] = field(default_factory=dict)
    """The last file part of each name."""
    images: list[tuple[str, bytes]] = field(default_factory=list)
    """Every ``image`` / ``image[]`` file part in order: (field name, bytes)."""


@dataclass
class FakeOpenAI:
    """State of the fake server: the key it accepts, what it received and scripted failures to answer first."""

    key: str
    received: list[Received] = field(default_factory=list)
    failures: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    url_mode: bool = False
    stored: dict[str, bytes] = field(default_factory=dict)


def api_error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def parse_multipart(content_type: str, raw: bytes, got: Received) -> None:
    """Form fields and files of a multipart/form-data body into ``got``, with the standard library's
    MIME parser."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    assert message.is_multipart(), content_type
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str) and isinstance(payload, bytes)
        filename = part.get_filename()
        if filename is None:
            got.form[name] = payload.decode()
        else:
            got.files[name] = (filename, part.get_content_type(), payload)
            if name in ("image", "image[]"):
                got.images.append((name, payload))


def error(status: int, body: dict[str, Any]) -> Reply:
    return Reply(status, body, {"Retry-After": "0"} if status == 429 else {})


def _parameters(request: Request, got: Received) -> tuple[dict[str, Any], Any] | Reply:
    """The request's settings and source image (None for a generation), or the error reply."""
    if request.path == "/v1/images/generations":
        got.json = request.json()
        return dict(got.json or {}), None
    if request.path != "/v1/images/edits":
        return error(404, api_error(f"Invalid URL (POST {request.path})"))
    parse_multipart(request.headers["Content-Type"], request.body, got)
    if not got.images:
        return error(
            400, api_error("Missing required parameter: 'image'.", code="missing_required_parameter")
        )
    if len(got.images) > MAX_IMAGES:
        return error(400, api_error(f"Too many images: at most {MAX_IMAGES}.", code="invalid_value"))
    return dict(got.form), Image.open(io.BytesIO(got.images[0][1])).convert("RGB")


def _post(state: FakeOpenAI, request: Request) -> Reply:
    got = Received(request.path, request.headers)
    state.received.append(got)
    if request.headers.get("Authorization") != f"Bearer {state.key}":
        return error(401, api_error("Incorrect API key provided.", code="invalid_api_key"))
    if state.failures:
        return error(*state.failures.pop(0))
    parsed = _parameters(request, got)
    if isinstance(parsed, Reply):
        return parsed
    params, source = parsed
    model = str(params.get("model"))
    if model.startswith("gpt-image") and "response_format" in params:
        return error(400, api_error("Unknown parameter: 'response_format'.", code="unknown_parameter"))
    if model.startswith("gpt-image") and params.get("size") not in GPT_IMAGE_SIZES:
        return error(400, api_error(f"Invalid value: '{params.get('size')}'.", code="invalid_value"))
    width, height = (int(v) for v in str(params["size"]).split("x"))
    if source is None:
        out = Image.new("RGB", (width, height), colour_of(str(params["prompt"])))
    else:
        out = ImageChops.invert(source).resize((width, height))
    if state.url_mode:
        state.stored["result.png"] = base64.b64decode(png_b64(out))
        url = f"http://{request.headers['Host']}/files/result.png"
        return Reply(200, {"created": 1, "data": [{"url": url}]})
    return Reply(200, {"created": 1, "data": [{"b64_json": png_b64(out)}], "size": params["size"]})


def handler(state: FakeOpenAI) -> Handle:
    def handle(request: Request) -> Reply:
        if request.method != "GET":
            return _post(state, request)
        state.received.append(Received(request.path, request.headers))
        name = request.path.rsplit("/", 1)[-1]
        if name in state.stored:
            return Reply(200, state.stored[name], content_type="image/png")
        return error(404, api_error("no such file"))

    return handle


@contextmanager
def openai_images_server(key: str) -> Iterator[tuple[FakeOpenAI, str]]:
    """``with openai_images_server(KEY) as (state, base_url): ...``; ``base_url`` ends in ``/v1``."""
    state = FakeOpenAI(key)
    with LocalServer(handler(state)) as server:
        yield state, f"{server.url}/v1"
