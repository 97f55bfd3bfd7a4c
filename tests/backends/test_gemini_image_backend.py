"""The gemini-image backend against a fake ``google-genai`` client.

The fake mirrors exactly the SDK surface the backend uses (``googleapis/python-genai``): ``genai.Client(
api_key=, http_options=)`` with ``.models.generate_content(*, model, contents, config)`` and ``.close()``;
the reply types ``GenerateContentResponse.candidates / prompt_feedback``, ``Candidate.content /
finish_reason / finish_message``, ``Content.parts``, ``Part.text / inline_data / thought``,
``Blob.data / mime_type``; the request's dict forms (``PartDict`` with ``inline_data``); and ``errors.APIError(code, response_json)`` with ``code``, ``status``,
``message``. The config dict is checked against the real ``GenerateContentConfig`` / ``ImageConfig`` field
names, as the SDK's pydantic models forbid unknown keys.
"""

from __future__ import annotations

import io
import sys
import types
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import pytest
from PIL import Image

from interleave_thinker.backends.image.gemini_image_backend import (
    ALIASES,
    GeminiImageBackend,
    aspect_ratio,
    image_config,
    resolve_model,
)
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.specs import BackendOptions, load_image_backend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError

# Field names of the real pydantic models (extra='forbid' there).
CONFIG_FIELDS = {
    "system_instruction", "temperature", "top_p", "top_k", "candidate_count", "max_output_tokens",
    "stop_sequences", "seed", "response_mime_type", "safety_settings", "response_modalities",
    "thinking_config", "image_config", "http_options",
}  # fmt: skip
IMAGE_CONFIG_FIELDS = {"aspect_ratio", "image_size", "output_mime_type", "output_compression_quality"}
SUPPORTED_RATIOS = {"1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"}


# --- the fake SDK surface -------------------------------------------------------------------------


@dataclass
class Blob:
    data: bytes | None = None
    mime_type: str | None = None


@dataclass
class Part:
    text: str | None = None
    inline_data: Blob | None = None
    thought: bool | None = None


@dataclass
class Content:
    parts: list[Part] | None = None
    role: str | None = "model"


@dataclass
class Candidate:
    content: Content | None = None
    finish_reason: str | None = None
    finish_message: str | None = None


@dataclass
class PromptFeedback:
    block_reason: str | None = None
    block_reason_message: str | None = None


@dataclass
class GenerateContentResponse:
    candidates: list[Candidate] | None = None
    prompt_feedback: PromptFeedback | None = None


class APIError(Exception):
    """Like ``google.genai.errors.APIError``: ``code`` from the status, message/status from the body."""

    def __init__(self, code: int, response_json: dict[str, Any]) -> None:
        error = response_json.get("error", {})
        self.details = response_json
        self.message = response_json.get("message", error.get("message"))
        self.status = response_json.get("status", error.get("status"))
        self.code = code or error.get("code")
        super().__init__(f"{self.code} {self.status}. {self.details}")


class ClientError(APIError):
    pass


class ServerError(APIError):
    pass


def error_body(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


@dataclass
class Call:
    model: str
    contents: list[Any]
    config: dict[str, Any]


class FakeModels:
    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.calls: list[Call] = []

    def generate_content(self, *, model: str, contents: Any, config: Any = None) -> GenerateContentResponse:
        assert set(config) <= CONFIG_FIELDS, set(config) - CONFIG_FIELDS
        assert set(config.get("image_config", {})) <= IMAGE_CONFIG_FIELDS
        assert config["image_config"]["aspect_ratio"] in SUPPORTED_RATIOS
        self.calls.append(Call(model, list(contents), config))
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step(self.calls[-1]) if callable(step) else step


class FakeClient:
    instances: ClassVar[list[FakeClient]] = []

    def __init__(
        self, *, api_key: str | None = None, http_options: Any = None, script: list[Any] | None = None
    ):
        self.api_key, self.http_options, self.closed = api_key, http_options, False
        self.models = FakeModels(script if script is not None else [])
        FakeClient.instances.append(self)

    def close(self) -> None:
        self.closed = True


def png(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def image_reply(
    size: tuple[int, int] = (1024, 1024),
    colour: tuple[int, int, int] = (0, 128, 0),
    text: str | None = "Here it is.",
) -> GenerateContentResponse:
    parts = ([Part(text=text)] if text else []) + [Part(inline_data=Blob(png(size, colour), "image/png"))]
    return GenerateContentResponse([Candidate(Content(parts), finish_reason="STOP")])


def backend_with(
    *script: Any, model: str = "nano-banana"
) -> tuple[GeminiImageBackend, FakeClient, list[float]]:
    client = FakeClient(script=list(script))
    sleeps: list[float] = []
    remote = RemoteOptions(max_retries=2, backoff_base=0.001, backoff_max=0.002)
    return GeminiImageBackend(model, remote=remote, client=client, sleep=sleeps.append), client, sleeps


@pytest.fixture
def fake_sdk(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("google.genai")
    module.Client = FakeClient  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google.genai", module)
    FakeClient.instances = []
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return module


# --- tests ----------------------------------------------------------------------------------------


def test_text_to_image_call_and_result() -> None:
    backend, client, _ = backend_with(image_reply(colour=(0, 128, 0)))
    image = backend.generate(ImageRequest("a green field", seed=300))
    assert image.size == (1024, 1024) and image.getpixel((3, 3)) == (0, 128, 0)
    [call] = client.models.calls
    assert call.model == "gemini-2.5-flash-image"
    assert call.contents == ["a green field"]
    assert call.config == {
        "response_modalities": ["TEXT", "IMAGE"],
        "seed": 300,
        "image_config": {"aspect_ratio": "1:1"},
    }


def test_edit_sends_prompt_then_image() -> None:
    backend, client, _ = backend_with(image_reply(colour=(9, 9, 9)))
    source = Image.new("RGBA", (1024, 1024), (200, 10, 10, 255))
    result = backend.generate(ImageRequest("make it blue", image=source))
    [call] = client.models.calls
    assert call.contents[0] == "make it blue"
    part = call.contents[1]
    assert set(part) == {"inline_data"} and part["inline_data"]["mime_type"] == "image/png"
    sent = Image.open(io.BytesIO(part["inline_data"]["data"]))
    assert sent.format == "PNG" and sent.mode == "RGB" and sent.size == (1024, 1024)
    assert sent.getpixel((0, 0)) == (200, 10, 10)
    assert result.getpixel((0, 0)) == (9, 9, 9)


def test_thought_images_are_skipped() -> None:
    thought = Part(inline_data=Blob(png((64, 64), (255, 0, 0)), "image/png"), thought=True)
    final = Part(inline_data=Blob(png((64, 64), (0, 0, 255)), "image/png"))
    reply = GenerateContentResponse([Candidate(Content([Part(text="draft", thought=True), thought, final]))])
    backend, _, _ = backend_with(reply)
    assert backend.generate(ImageRequest("x", width=64, height=64)).getpixel((0, 0)) == (0, 0, 255)


def test_size_maps_to_aspect_ratio_and_result_is_fitted() -> None:
    backend, client, _ = backend_with(image_reply(size=(1344, 768), colour=(1, 2, 3)))
    image = backend.generate(ImageRequest("wide", width=1280, height=720))
    assert client.models.calls[0].config["image_config"] == {"aspect_ratio": "16:9"}
    assert image.size == (1280, 720) and image.getpixel((640, 360)) == (1, 2, 3)


def test_aspect_and_image_size_table() -> None:
    assert aspect_ratio(1024, 1024) == "1:1"
    assert aspect_ratio(720, 1280) == "9:16"
    assert aspect_ratio(1200, 900) == "4:3"
    assert aspect_ratio(2520, 1080) == "21:9"
    assert image_config("gemini-2.5-flash-image", 2048, 2048) == {"aspect_ratio": "1:1"}
    assert image_config("gemini-3-pro-image", 1024, 1024) == {"aspect_ratio": "1:1"}
    assert image_config("gemini-3-pro-image", 2048, 1536) == {"aspect_ratio": "4:3", "image_size": "2K"}
    assert image_config("gemini-3.1-flash-image", 4096, 2304) == {"aspect_ratio": "16:9", "image_size": "4K"}


def test_aliases() -> None:
    assert resolve_model("nano-banana") == "gemini-2.5-flash-image"
    assert resolve_model("nano-banana-pro") == "gemini-3-pro-image"
    assert resolve_model("nano-banana-2") == "gemini-3.1-flash-image"
    assert resolve_model("gemini-2.5-flash-image-preview") == "gemini-2.5-flash-image-preview"
    assert set(ALIASES) == {"nano-banana", "nano-banana-pro", "nano-banana-2"}
    with pytest.raises(ConfigError, match="no model"):
        resolve_model("")


def test_429_and_503_are_retried_with_backoff() -> None:
    backend, client, sleeps = backend_with(
        ClientError(429, error_body(429, "RESOURCE_EXHAUSTED", "Quota exceeded.")),
        ServerError(503, error_body(503, "UNAVAILABLE", "The model is overloaded.")),
        image_reply(colour=(5, 5, 5)),
    )
    assert backend.generate(ImageRequest("again")).getpixel((0, 0)) == (5, 5, 5)
    assert len(client.models.calls) == 3
    assert len(sleeps) == 2 and all(0 < s <= 0.003 for s in sleeps)


def test_transport_timeout_is_retried() -> None:
    backend, client, sleeps = backend_with(httpx.ReadTimeout("timed out"), image_reply())
    backend.generate(ImageRequest("slow"))
    assert len(client.models.calls) == 2 and len(sleeps) == 1


def test_retries_run_out() -> None:
    errors = [ServerError(500, error_body(500, "INTERNAL", "Internal error.")) for _ in range(3)]
    backend, client, _ = backend_with(*errors)
    with pytest.raises(BackendError, match=r"3 tries failed.*500 INTERNAL") as info:
        backend.generate(ImageRequest("x"))
    assert isinstance(info.value.__cause__, ServerError)
    assert len(client.models.calls) == 3


def test_400_is_not_retried_and_carries_the_message() -> None:
    backend, client, sleeps = backend_with(
        ClientError(400, error_body(400, "INVALID_ARGUMENT", "Unsupported aspect ratio for this model."))
    )
    with pytest.raises(
        BackendError, match=r"HTTP 400 INVALID_ARGUMENT: Unsupported aspect ratio for this model\."
    ):
        backend.generate(ImageRequest("x"))
    assert len(client.models.calls) == 1 and sleeps == []


def test_403_hints_at_the_key() -> None:
    backend, _, _ = backend_with(ClientError(403, error_body(403, "PERMISSION_DENIED", "Permission denied.")))
    with pytest.raises(BackendError, match="Check that the API key is valid"):
        backend.generate(ImageRequest("x"))


def test_text_only_reply_is_an_error_quoting_the_model() -> None:
    reply = GenerateContentResponse(
        [Candidate(Content([Part(text="I can't create images of that person.")]), finish_reason="STOP")]
    )
    backend, client, _ = backend_with(reply)
    with pytest.raises(BackendError) as info:
        backend.generate(ImageRequest("a famous person"))
    assert "I can't create images of that person." in str(info.value)
    assert "finish_reason=STOP" in str(info.value)
    assert len(client.models.calls) == 1


def test_blocked_prompt_is_an_error_with_the_reason() -> None:
    reply = GenerateContentResponse(None, PromptFeedback("SAFETY", "The prompt was blocked."))
    backend, _, _ = backend_with(reply)
    with pytest.raises(BackendError, match=r"no image \(prompt blocked: SAFETY; The prompt was blocked\.\)"):
        backend.generate(ImageRequest("x"))


def test_image_safety_finish_without_parts() -> None:
    reply = GenerateContentResponse([Candidate(Content(None), finish_reason="IMAGE_SAFETY")])
    backend, _, _ = backend_with(reply)
    with pytest.raises(BackendError, match="finish_reason=IMAGE_SAFETY"):
        backend.generate(ImageRequest("x"))


def test_client_built_from_the_environment_key(
    fake_sdk: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "  gm-key-123 ")
    backend = GeminiImageBackend("nano-banana-pro", remote=RemoteOptions(timeout=30.0))
    [client] = FakeClient.instances
    assert client.api_key == "gm-key-123"
    assert client.http_options == {"timeout": 30000}
    assert backend.client is client
    backend.close()
    assert client.closed


def test_injected_client_is_not_closed() -> None:
    backend, client, _ = backend_with()
    backend.close()
    assert not client.closed


def test_missing_key_names_the_variable(fake_sdk: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        GeminiImageBackend("nano-banana")
    monkeypatch.setenv("GEMINI_API_KEY", "unused-because-another-variable-is-named")
    with pytest.raises(ConfigError, match="set TEAM_GEMINI_KEY") as info:
        GeminiImageBackend("nano-banana", remote=RemoteOptions(api_key_env="TEAM_GEMINI_KEY"))
    assert "unused-because" not in str(info.value)


def test_sdk_not_installed_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    with pytest.raises(BackendError, match=r"pip install 'interleave-thinker\[gemini\]'") as info:
        GeminiImageBackend("nano-banana")
    assert isinstance(info.value.__cause__, ImportError)


def test_registry_loads_the_backend_with_the_alias(
    fake_sdk: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    backend = load_image_backend(
        "gemini-image:nano-banana-2", BackendOptions(remote=RemoteOptions(timeout=5.0))
    )
    assert isinstance(backend, GeminiImageBackend)
    assert backend.name == "gemini-image:gemini-3.1-flash-image"
    [client] = FakeClient.instances
    assert client.api_key == "g-key" and client.http_options == {"timeout": 5000}
    client.models.script.append(image_reply(size=(512, 512), colour=(7, 7, 7)))
    [result] = backend.generate_batch([ImageRequest("p", width=512, height=512, seed=101)])
    assert result.size == (512, 512) and result.getpixel((0, 0)) == (7, 7, 7)
    assert client.models.calls[0].model == "gemini-3.1-flash-image"
    assert client.models.calls[0].config["seed"] == 101
