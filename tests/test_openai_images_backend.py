"""The openai-images backend against a fake OpenAI Images server on 127.0.0.1.

The fake speaks the real wire format (OpenAI API reference, ``openai-python`` ``ImageGenerateParams`` /
``ImageEditParams`` / ``ImagesResponse``): JSON for ``/images/generations``, ``multipart/form-data`` for
``/images/edits`` (parsed with the standard library's MIME parser), base64 PNGs in ``data[0].b64_json``,
errors as ``{"error": {"message", "type", "param", "code"}}``, and a bearer key.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from PIL import Image, ImageChops

from interleave_thinker.backends.image.openai_images_backend import (
    OpenAIImagesBackend,
    api_size,
    parse_target,
)
from interleave_thinker.backends.specs import BackendOptions, load_image_backend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError

KEY = "sk-test-not-a-real-key"
FAST = RemoteOptions(max_retries=2, backoff_base=0.001, backoff_max=0.002, timeout=10.0)
GPT_IMAGE_SIZES = {"1024x1024", "1536x1024", "1024x1536", "auto"}


def png_b64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


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


class FakeOpenAI:
    """State of the fake server: what it received and scripted failures to answer first."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.failures: list[tuple[int, dict[str, Any]]] = []
        self.url_mode = False
        self.stored: dict[str, bytes] = {}


def api_error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def make_handler(state: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # silence the test output
            pass

        def reply(
            self, status: int, body: dict[str, Any] | bytes, content_type: str = "application/json"
        ) -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            state.received.append(Received(self.path, dict(self.headers)))
            name = self.path.rsplit("/", 1)[-1]
            if name in state.stored:
                self.reply(200, state.stored[name], "image/png")
            else:
                self.reply(404, api_error("no such file"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            got = Received(self.path, dict(self.headers))
            state.received.append(got)
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                self.reply(401, api_error("Incorrect API key provided.", code="invalid_api_key"))
                return
            if state.failures:
                status, body = state.failures.pop(0)
                self.reply(status, body)
                return
            if self.path == "/v1/images/generations":
                got.json = json.loads(raw)
                params: dict[str, Any] = got.json
                source = None
            elif self.path == "/v1/images/edits":
                got.form, got.files = parse_multipart(self.headers["Content-Type"], raw)
                params = dict(got.form)
                if "image" not in got.files:
                    self.reply(
                        400,
                        api_error("Missing required parameter: 'image'.", code="missing_required_parameter"),
                    )
                    return
                source = Image.open(io.BytesIO(got.files["image"][2])).convert("RGB")
            else:
                self.reply(404, api_error(f"Invalid URL (POST {self.path})"))
                return
            model = str(params.get("model"))
            if model.startswith("gpt-image") and "response_format" in params:
                self.reply(400, api_error("Unknown parameter: 'response_format'.", code="unknown_parameter"))
                return
            if model.startswith("gpt-image") and params.get("size") not in GPT_IMAGE_SIZES:
                self.reply(400, api_error(f"Invalid value: '{params.get('size')}'.", code="invalid_value"))
                return
            width, height = (int(v) for v in str(params["size"]).split("x"))
            if source is None:
                out = Image.new("RGB", (width, height), colour_of(str(params["prompt"])))
            else:  # an "edit": the inverted input at the asked size
                out = ImageChops.invert(source).resize((width, height))
            if state.url_mode:
                state.stored["result.png"] = base64.b64decode(png_b64(out))
                host = self.headers["Host"]
                self.reply(200, {"created": 1, "data": [{"url": f"http://{host}/files/result.png"}]})
            else:
                self.reply(200, {"created": 1, "data": [{"b64_json": png_b64(out)}], "size": params["size"]})

    return Handler


def parse_multipart(
    content_type: str, raw: bytes
) -> tuple[dict[str, str], dict[str, tuple[str | None, str, bytes]]]:
    """Form fields and files of a multipart/form-data body, with the standard library's MIME parser."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    assert message.is_multipart(), content_type
    form: dict[str, str] = {}
    files: dict[str, tuple[str | None, str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str) and isinstance(payload, bytes)
        filename = part.get_filename()
        if filename is None:
            form[name] = payload.decode()
        else:
            files[name] = (filename, part.get_content_type(), payload)
    return form, files


@pytest.fixture
def server() -> Iterator[tuple[FakeOpenAI, str]]:
    state = FakeOpenAI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def backend(server: tuple[FakeOpenAI, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIImagesBackend]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIImagesBackend("gpt-image-1", base_url=server[1], remote=FAST) as b:
        yield b


def test_text_to_image_sends_json_with_bearer_and_decodes_b64(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    image = backend.generate("a red fox", seed=7, steps=3, guidance=2.0)
    assert image.size == (1024, 1024) and image.mode == "RGB"
    assert image.getpixel((10, 10)) == colour_of("a red fox")
    [got] = state.received
    assert got.path == "/v1/images/generations"
    assert got.headers["Authorization"] == f"Bearer {KEY}"
    assert got.headers["Content-Type"] == "application/json"
    # No seed, steps or guidance on the wire: the API has none.
    assert got.json == {"model": "gpt-image-1", "prompt": "a red fox", "n": 1, "size": "1024x1024"}


def test_edit_sends_multipart_form_with_png_image(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    source = Image.new("RGB", (1024, 1024), (10, 20, 30))
    source.putpixel((0, 0), (255, 255, 255))
    result = backend.generate("make it night", image=source)
    [got] = state.received
    assert got.path == "/v1/images/edits"
    assert got.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert got.form == {"model": "gpt-image-1", "prompt": "make it night", "n": "1", "size": "1024x1024"}
    filename, content_type, payload = got.files["image"]
    assert (filename, content_type) == ("image.png", "image/png")
    sent = Image.open(io.BytesIO(payload))
    assert sent.format == "PNG" and sent.size == (1024, 1024)
    assert sent.convert("RGB").getpixel((0, 0)) == (255, 255, 255)
    assert result.getpixel((5, 5)) == (245, 235, 225)  # the fake inverts the input
    assert result.getpixel((0, 0)) == (0, 0, 0)


def test_size_maps_to_nearest_supported_and_result_is_fitted(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    image = backend.generate("a wide landscape", width=1280, height=720)
    assert state.received[0].json is not None and state.received[0].json["size"] == "1536x1024"
    assert image.size == (1280, 720)
    assert image.getpixel((640, 360)) == colour_of("a wide landscape")


def test_api_size_table() -> None:
    assert api_size("gpt-image-1", 1024, 1024) == (1024, 1024)
    assert api_size("gpt-image-1", 720, 1280) == (1024, 1536)
    assert api_size("gpt-image-1.5", 2048, 1024) == (1536, 1024)
    assert api_size("dall-e-3", 1920, 1080) == (1792, 1024)
    assert api_size("dall-e-2", 300, 300) == (256, 256)
    assert api_size("dall-e-2", 1000, 1000) == (1024, 1024)
    assert api_size("gpt-image-2", 1000, 600) == (1008, 608)
    assert api_size("gpt-image-2", 4000, 1000) == (3456, 1152)  # aspect clamped to 3:1
    assert api_size("gpt-image-2", 8000, 4500) == (3840, 2160)  # bounded to 3840x2160
    assert api_size("my-local-model", 1000, 600) == (1000, 600)


def test_unknown_model_gets_exact_size_and_response_format(
    server: tuple[FakeOpenAI, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, base = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIImagesBackend("flux-klein", base_url=base, remote=FAST) as b:
        image = b.generate("a cube", width=640, height=480)
    assert image.size == (640, 480)
    assert state.received[0].json == {
        "model": "flux-klein",
        "prompt": "a cube",
        "n": 1,
        "size": "640x480",
        "response_format": "b64_json",
    }


def test_url_reply_is_fetched_without_leaking_the_key_elsewhere(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    state.url_mode = True
    image = backend.generate("a blue square")
    assert image.getpixel((1, 1)) == colour_of("a blue square")
    assert [r.path for r in state.received] == ["/v1/images/generations", "/files/result.png"]
    # Same host as the API here, so the key may go along; another host would not get it.
    request = backend._download_request(backend._caller.client, "https://storage.example/x.png", 5.0)
    assert "Authorization" not in request.headers


def test_429_then_success_is_retried(server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend) -> None:
    state, _ = server
    state.failures = [(429, api_error("Rate limit reached for images.", "requests", "rate_limit_exceeded"))]
    image = backend.generate("retry me")
    assert image.getpixel((0, 0)) == colour_of("retry me")
    assert [r.path for r in state.received] == ["/v1/images/generations"] * 2


def test_5xx_until_retries_run_out(server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend) -> None:
    state, _ = server
    state.failures = [(503, api_error("The server is overloaded.", "server_error"))] * 5
    with pytest.raises(BackendError, match=r"3 tries failed.*HTTP 503: The server is overloaded"):
        backend.generate("never")
    assert len(state.received) == 3  # first try + max_retries=2


def test_400_is_not_retried_and_carries_the_api_message(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    state.failures = [
        (400, api_error("Your request was rejected by the safety system.", code="moderation_blocked"))
    ]
    with pytest.raises(BackendError) as info:
        backend.generate("something disallowed")
    message = str(info.value)
    assert "HTTP 400" in message
    assert "Your request was rejected by the safety system." in message
    assert "moderation_blocked" in message
    assert len(state.received) == 1


def test_wrong_key_is_401_with_a_hint_and_no_key_in_the_text(
    server: tuple[FakeOpenAI, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, base = server
    monkeypatch.setenv("MY_IMAGES_KEY", "sk-wrong-secret-value")
    remote = FAST.model_copy(update={"api_key_env": "MY_IMAGES_KEY"})
    with (
        OpenAIImagesBackend("gpt-image-1", base_url=base, remote=remote) as b,
        pytest.raises(BackendError) as info,
    ):
        b.generate("x")
    assert "Incorrect API key provided." in str(info.value)
    assert "MY_IMAGES_KEY" in str(info.value)
    assert "sk-wrong-secret-value" not in str(info.value)
    assert state.received[0].headers["Authorization"] == "Bearer sk-wrong-secret-value"
    assert len(state.received) == 1


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        OpenAIImagesBackend("gpt-image-1")
    monkeypatch.delenv("TEAM_KEY", raising=False)
    with pytest.raises(BackendError, match="TEAM_KEY"):
        OpenAIImagesBackend(
            "gpt-image-1", base_url="http://127.0.0.1:9/v1", remote=RemoteOptions(api_key_env="TEAM_KEY")
        )


def test_local_server_without_key_sends_no_auth_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIImagesBackend("local", base_url="http://127.0.0.1:9/v1") as b:
        assert "Authorization" not in b._caller.client.headers


def test_dalle3_edit_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIImagesBackend("dall-e-3") as b, pytest.raises(BackendError, match="cannot edit"):
        b.generate("x", image=Image.new("RGB", (8, 8)))


def test_spec_parsing() -> None:
    assert parse_target("gpt-image-1") == ("gpt-image-1", "https://api.openai.com/v1")
    assert parse_target("m@http://h:1/v1/") == ("m", "http://h:1/v1")
    with pytest.raises(ConfigError, match="no model"):
        parse_target("@http://h/v1")
    with pytest.raises(ConfigError, match="must start with http"):
        parse_target("gpt-image-1@h:1/v1")


def test_registry_loads_the_backend(server: tuple[FakeOpenAI, str], monkeypatch: pytest.MonkeyPatch) -> None:
    state, base = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    backend = load_image_backend(f"openai-images:gpt-image-1@{base}", BackendOptions(remote=FAST))
    assert isinstance(backend, OpenAIImagesBackend)
    try:
        assert backend.name == "openai-images:gpt-image-1"
        [a, b] = backend.generate_batch(
            [{"prompt": "one"}, {"prompt": "three", "width": 1536, "height": 1024}]
        )
    finally:
        backend.close()
    assert a.size == (1024, 1024) and b.size == (1536, 1024)
    assert [r.json["size"] for r in state.received if r.json] == ["1024x1024", "1536x1024"]
