"""The gemini: backend with a fake SDK client (google-genai is an optional extra, absent in tests)."""

from __future__ import annotations

import io
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from PIL import Image

from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
from interleave_thinker.backends.vlm.gemini_backend import GeminiVLMBackend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.testing.doubles.gemini_sdk import install_genai_client

FAST = RetrySettings(max_retries=3, backoff_base=0.01, backoff_max=0.05, timeout=30.0)


class FakeAPIError(Exception):
    """Shaped like ``google.genai.errors.APIError``: ``(code, response_json)``, ``.code``, ``.message``."""

    def __init__(self, code: int, response_json: dict[str, Any]) -> None:
        self.code = code
        self.message = response_json.get("message")
        self.status = response_json.get("status")
        super().__init__(f"{code} {self.status}. {response_json}")


class FakeClientError(FakeAPIError):
    pass


class FakeServerError(FakeAPIError):
    pass


@dataclass
class FakeResponse:
    text: str | None
    candidates: list[Any] | None = None
    prompt_feedback: Any = None


class FakeModels:
    """``client.models.generate_content(model=, contents=, config=)``: the one SDK call the backend makes."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []

    def generate_content(self, *, model: str, contents: list[Any], config: dict[str, Any]) -> FakeResponse:
        self.calls.append({"model": model, "contents": contents, "config": config})
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, BaseException):
            raise item
        return FakeResponse(item) if isinstance(item, str) or item is None else item


class FakeClient:
    def __init__(self, *script: Any) -> None:
        self.models = FakeModels(list(script))


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[GeminiVLMBackend] = []

    def build(*script: Any, **kwargs: Any) -> GeminiVLMBackend:
        kwargs.setdefault("retry", FAST)
        made.append(GeminiVLMBackend("gemini-2.5-pro", client=FakeClient(*script), **kwargs))
        return made[-1]

    yield build
    for backend in made:
        backend.close()


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


def calls(backend: GeminiVLMBackend) -> list[dict[str, Any]]:
    return backend.client.models.calls


def test_request_shape_and_reply(make: Any) -> None:
    backend = make("  a plan  ")
    picture = Image.effect_noise((40, 30), 50).convert("RGB")
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "You plan."}]},
        {"role": "user", "content": [{"type": "image", "image": picture}, {"type": "text", "text": "go"}]},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
    ]
    assert backend.chat(messages, max_new_tokens=99, temperature=0) == "a plan"
    [call] = calls(backend)
    assert call["model"] == "gemini-2.5-pro"
    assert call["config"] == {
        "temperature": 0.0,
        "max_output_tokens": 99,
        "system_instruction": "You plan.",
        "http_options": {"timeout": 30000},
    }
    first, second, third = call["contents"]
    assert [first["role"], second["role"], third["role"]] == ["user", "model", "user"]
    blob = first["parts"][0]["inline_data"]
    assert blob["mime_type"] == "image/png"
    assert Image.open(io.BytesIO(blob["data"])).convert("RGB").tobytes() == picture.tobytes()
    assert first["parts"][1] == {"text": "go"}
    assert second["parts"] == [{"text": "earlier answer"}]
    assert third["parts"] == [{"text": "again"}]
    assert backend.name == "gemini:gemini-2.5-pro"


def test_max_pixels_bounds_inline_images(make: Any) -> None:
    backend = make("ok")
    big = Image.new("RGB", (900, 600), "blue")
    backend.chat([{"role": "user", "content": [{"type": "image", "image": big, "max_pixels": 128 * 128}]}])
    data = calls(backend)[0]["contents"][0]["parts"][0]["inline_data"]["data"]
    size = Image.open(io.BytesIO(data)).size
    assert size == (128, 96)  # 900x600 scaled by sqrt(16384/540000), floored to multiples of 32


@pytest.mark.parametrize("code", [503, 500, 429, 408])
def test_retryable_codes_then_success(make: Any, code: int) -> None:
    backend = make(FakeServerError(code, {"message": "try later", "status": "UNAVAILABLE"}), "done")
    assert backend.chat(user("x")) == "done"
    assert len(calls(backend)) == 2


def test_transport_errors_are_retried(make: Any) -> None:
    backend = make(httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), "back")
    assert backend.chat(user("x")) == "back"
    assert len(calls(backend)) == 3


def test_client_error_not_retried(make: Any) -> None:
    error = FakeClientError(
        400, {"message": "Request contains an invalid argument.", "status": "INVALID_ARGUMENT"}
    )
    backend = make(error, "never")
    with pytest.raises(BackendError) as info:
        backend.chat(user("x"))
    assert len(calls(backend)) == 1
    assert "HTTP 400 INVALID_ARGUMENT: Request contains an invalid argument." in str(info.value)
    assert info.value.__cause__ is error


def test_persistent_server_errors_give_up(make: Any) -> None:
    backend = make(FakeServerError(503, {"message": "overloaded"}))
    with pytest.raises(BackendError, match="HTTP 503: overloaded"):
        backend.chat(user("x"))
    assert len(calls(backend)) == FAST.max_retries + 1


def test_empty_reply_is_retried_then_fails(make: Any) -> None:
    backend = make(FakeResponse(None, candidates=[types.SimpleNamespace(finish_reason="SAFETY")]))
    with pytest.raises(BackendError, match="finish_reason=SAFETY"):
        backend.chat(user("x"))
    assert len(calls(backend)) == FAST.max_retries + 1


def test_other_sdk_exceptions_become_backend_errors(make: Any) -> None:
    backend = make(ValueError("unsupported content"))
    with pytest.raises(BackendError, match="ValueError: unsupported content"):
        backend.chat(user("x"))
    assert len(calls(backend)) == 1


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="set GEMINI_API_KEY"):
        load_vlm_backend("gemini:gemini-2.5-pro")


def test_not_installed_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")
    monkeypatch.setitem(sys.modules, "google", None)  # makes `from google import genai` fail
    with pytest.raises(BackendError) as info:
        load_vlm_backend("gemini:gemini-2.5-pro")
    assert "pip install 'interleave-thinker[gemini]'" in str(info.value)
    assert "g-key" not in str(info.value)


def test_sdk_client_built_with_key_from_configured_env(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []
    closed: list[bool] = []

    class Client:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            self.models = FakeModels(["hello from sdk"])

        def close(self) -> None:
            closed.append(True)

    install_genai_client(monkeypatch, Client)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("TEAM_GEMINI_KEY", "g-456")
    options = BackendOptions(remote=RemoteOptions(api_key_env="TEAM_GEMINI_KEY", timeout=12))
    backend = load_vlm_backend("gemini:gemini-2.5-flash", options)
    assert isinstance(backend, GeminiVLMBackend)
    try:
        assert backend.chat(user("hi")) == "hello from sdk"
    finally:
        backend.close()
    assert built == [{"api_key": "g-456", "http_options": {"timeout": 12000}}]
    assert backend.model == "gemini-2.5-flash"
    assert closed == [True]  # the client it made is closed with it


def test_an_injected_client_is_left_open() -> None:
    class Client(FakeClient):
        closed = False

        def close(self) -> None:
            self.closed = True

    client = Client("x")
    GeminiVLMBackend("gemini-2.5-pro", client=client, retry=FAST).close()
    assert not client.closed


def test_empty_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"gemini:gemini-2\.5-pro"):
        GeminiVLMBackend("", client=FakeClient("x"))
