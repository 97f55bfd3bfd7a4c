"""The openai-images backend against a fake OpenAI Images server on 127.0.0.1.

The fake (:mod:`interleave_thinker.testing.doubles.openai_images`) speaks the real wire format: JSON for
``/images/generations``, ``multipart/form-data`` for ``/images/edits``, base64 PNGs in ``data[0].b64_json``,
errors as ``{"error": {"message", "type", "param", "code"}}``, and a bearer key.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from PIL import Image

from interleave_thinker.backends.image.openai_images_backend import (
    OpenAIImagesBackend,
    api_size,
    parse_target,
)
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.specs import BackendOptions, load_image_backend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.testing.doubles.openai_images import (
    FakeOpenAI,
    api_error,
    colour_of,
    openai_images_server,
)

KEY = "sk-test-not-a-real-key"
FAST = RemoteOptions(max_retries=2, backoff_base=0.001, backoff_max=0.002, timeout=10.0)


@pytest.fixture
def server() -> Iterator[tuple[FakeOpenAI, str]]:
    with openai_images_server(KEY) as served:
        yield served


@pytest.fixture
def backend(server: tuple[FakeOpenAI, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIImagesBackend]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIImagesBackend("gpt-image-1", base_url=server[1], remote=FAST) as b:
        yield b


def test_text_to_image_sends_json_with_bearer_and_decodes_b64(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    image = backend.generate(ImageRequest("a red fox", seed=7, steps=3, guidance=2.0))
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
    result = backend.generate(ImageRequest("make it night", image=source))
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
    image = backend.generate(ImageRequest("a wide landscape", width=1280, height=720))
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
        image = b.generate(ImageRequest("a cube", width=640, height=480))
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
    image = backend.generate(ImageRequest("a blue square"))
    assert image.getpixel((1, 1)) == colour_of("a blue square")
    assert [r.path for r in state.received] == ["/v1/images/generations", "/files/result.png"]
    # Same host as the API here, so the key may go along; another host would not get it.
    request = backend._download_request(backend.caller.client, "https://storage.example/x.png", 5.0)
    assert "Authorization" not in request.headers


def test_429_then_success_is_retried(server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend) -> None:
    state, _ = server
    state.failures = [(429, api_error("Rate limit reached for images.", "requests", "rate_limit_exceeded"))]
    image = backend.generate(ImageRequest("retry me"))
    assert image.getpixel((0, 0)) == colour_of("retry me")
    assert [r.path for r in state.received] == ["/v1/images/generations"] * 2


def test_5xx_until_retries_run_out(server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend) -> None:
    state, _ = server
    state.failures = [(503, api_error("The server is overloaded.", "server_error"))] * 5
    with pytest.raises(BackendError, match=r"3 tries failed.*HTTP 503: The server is overloaded"):
        backend.generate(ImageRequest("never"))
    assert len(state.received) == 3  # first try + max_retries=2


def test_400_is_not_retried_and_carries_the_api_message(
    server: tuple[FakeOpenAI, str], backend: OpenAIImagesBackend
) -> None:
    state, _ = server
    state.failures = [
        (400, api_error("Your request was rejected by the safety system.", code="moderation_blocked"))
    ]
    with pytest.raises(BackendError) as info:
        backend.generate(ImageRequest("something disallowed"))
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
        b.generate(ImageRequest("x"))
    assert "Incorrect API key provided." in str(info.value)
    assert "MY_IMAGES_KEY" in str(info.value)
    assert "sk-wrong-secret-value" not in str(info.value)
    assert state.received[0].headers["Authorization"] == "Bearer sk-wrong-secret-value"
    assert len(state.received) == 1


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIImagesBackend("gpt-image-1")
    monkeypatch.delenv("TEAM_KEY", raising=False)
    with pytest.raises(ConfigError, match="TEAM_KEY"):
        OpenAIImagesBackend(
            "gpt-image-1", base_url="http://127.0.0.1:9/v1", remote=RemoteOptions(api_key_env="TEAM_KEY")
        )


def test_local_server_without_key_sends_no_auth_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIImagesBackend("local", base_url="http://127.0.0.1:9/v1") as b:
        assert "Authorization" not in b.caller.client.headers


def test_dalle3_edit_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIImagesBackend("dall-e-3") as b, pytest.raises(BackendError, match="cannot edit"):
        b.generate(ImageRequest("x", image=Image.new("RGB", (8, 8))))


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
        [a, b] = backend.generate_batch([ImageRequest("one"), ImageRequest("three", width=1536, height=1024)])
    finally:
        backend.close()
    assert a.size == (1024, 1024) and b.size == (1536, 1024)
    # a batch runs in parallel: both sizes were asked for, in either order
    assert sorted(r.json["size"] for r in state.received if r.json) == ["1024x1024", "1536x1024"]
