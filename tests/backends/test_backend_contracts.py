"""Every backend kind runs the contract suites of ``interleave_thinker.testing.contracts``.

Local kinds run as they are (the tiny diffusers/transformers models through the ``tiny:`` specs, marked
slow); served kinds run against the test doubles of their services on 127.0.0.1 (``/edit``, OpenAI chat
and images, vLLM-Omni/SGLang) or, for the SDK kinds, a client raising the SDK's own error classes.
FastVideo needs a CUDA GPU, so it runs on the stand-in ``fastvideo`` package of ``testing.doubles``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from PIL import Image

from interleave_thinker.backends.image.fastvideo_backend import FastVideoImageBackend
from interleave_thinker.backends.image.gemini_image_backend import GeminiImageBackend
from interleave_thinker.backends.image.http_backend import HTTPImageBackend
from interleave_thinker.backends.image.omni_backend import OmniImagesBackend, SGLangDiffusionBackend
from interleave_thinker.backends.image.openai_images_backend import OpenAIImagesBackend
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend
from interleave_thinker.backends.vlm.gemini_backend import GeminiVLMBackend
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.backends.wrapping import innermost
from interleave_thinker.cli.main import USAGE_ERRORS, main
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.testing.contracts import (
    UNSET_KEY_ENV,
    ImageBackendContract,
    Tries,
    VLMBackendContract,
    status_server,
)
from interleave_thinker.testing.doubles import openai_chat
from interleave_thinker.testing.doubles.fastvideo import install_fastvideo
from interleave_thinker.testing.doubles.gemini_sdk import install_genai_client
from interleave_thinker.testing.doubles.omni import OmniServer, OmniState, scripted_engine
from interleave_thinker.testing.doubles.openai_images import openai_images_server
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.runs import rollout

KEY = "contract-secret-key"
GEMINI_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


def retry_of(remote: RemoteOptions) -> RetrySettings:
    return RetrySettings.from_options(remote)


def digest_colour(*parts: object) -> tuple[int, int, int]:
    raw = hashlib.sha256(repr(parts).encode()).digest()
    return raw[0], raw[1], raw[2]


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


# --- local kinds --------------------------------------------------------------------------------------


class TestScriptedImageContract(ImageBackendContract):
    @pytest.fixture
    def backend(self) -> ScriptedImageBackend:
        return ScriptedImageBackend(fail_on=lambda prompt: prompt == "fail")

    def failing_call(self, backend: ScriptedImageBackend) -> Callable[[], object]:
        return lambda: backend.generate(self.request("fail"))


class TestScriptedVLMContract(VLMBackendContract):
    @pytest.fixture
    def backend(self) -> ScriptedVLMBackend:
        return ScriptedVLMBackend([lambda m: f"seen: {ScriptedVLMBackend.text_in(m)}"], repeat_last=True)

    def failing_call(self, backend: ScriptedVLMBackend) -> Callable[[], object]:
        return lambda: ScriptedVLMBackend([], name=backend.name).chat(self.conversation())


@pytest.mark.slow
class TestTinyDiffusersContract(ImageBackendContract):
    exact_batches = False  # one batched pipeline call rounds differently from single calls

    def failing_call(self, backend: Any) -> Callable[[], object]:
        """The pipeline itself fails mid-generation (as an out-of-memory error does)."""

        def broken(**kwargs: Any) -> Any:
            raise RuntimeError("CUDA out of memory (simulated)")

        def call() -> object:
            inner = innermost(backend)
            real, inner.pipe = inner.pipe, broken
            try:
                return backend.generate(self.request())
            finally:
                inner.pipe = real

        return call

    def test_an_image_the_pipeline_refuses_is_an_input_error_naming_the_backend(self, backend: Any) -> None:
        """FLUX.2 refuses edits of images under 64 px: a bad request (a 400 when served), not a failure."""
        small = Image.new("RGB", (40, 40))
        with pytest.raises(InputError, match="64") as info:
            backend.generate(self.request(image=small))
        assert str(info.value).startswith(backend.name), str(info.value)

    @pytest.fixture(scope="class")
    def backend(self) -> Iterator[Any]:
        backend: Any = load_image_backend("tiny:")  # every kind closes; the protocol does not demand it
        with backend:
            yield backend


@pytest.mark.slow
class TestTinyTransformersContract(VLMBackendContract):
    @pytest.fixture(scope="class")
    def backend(self) -> Iterator[Any]:
        backend: Any = load_vlm_backend("tiny:planner")
        with backend:
            yield backend


class TestFastVideoContract(ImageBackendContract):
    @pytest.fixture
    def backend(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastVideoImageBackend]:
        install_fastvideo(monkeypatch)
        with FastVideoImageBackend("fake/model") as backend:
            yield backend

    def failing_call(self, backend: FastVideoImageBackend) -> Callable[[], object]:
        return lambda: backend.generate(self.request("explode"))  # the stand-in's CUDA out of memory


# --- "/edit" (http:) ------------------------------------------------------------------------------------


def edit_server_handle(request: Request) -> Reply:
    """The authors' "/edit" protocol: a flat colour from prompt, seed and input, at the requested size."""
    body = request.json()
    source = body.get("image") or ""
    colour = digest_colour(body["prompt"], body["seed"], body["num_inference_step"], source[-64:])
    image = Image.new("RGB", (body["width"], body["height"]), colour)
    return Reply(200, {"success": True, "edited_image": base64.b64encode(png(image)).decode()})


class TestHTTPContract(ImageBackendContract):
    spec = "http:127.0.0.1:9"

    @pytest.fixture
    def backend(self) -> Iterator[HTTPImageBackend]:
        with LocalServer(edit_server_handle) as server, HTTPImageBackend(server.url) as backend:
            yield backend

    def failing_with(self, status: int, remote: RemoteOptions, stack: ExitStack) -> tuple[Any, Tries]:
        url, tries = stack.enter_context(status_server(status))
        return HTTPImageBackend(url, retry=retry_of(remote), cooldown=0), tries


# --- vLLM-Omni / SGLang Diffusion -----------------------------------------------------------------------


class TestOmniContract(ImageBackendContract):
    spec = "vllm-omni:127.0.0.1:9#m"
    backend_class: type[OmniImagesBackend] = OmniImagesBackend

    @pytest.fixture
    def backend(self) -> Iterator[OmniImagesBackend]:
        with (
            OmniServer(OmniState(engine=scripted_engine)) as server,
            self.backend_class(server.url, model=OmniState.model_name) as backend,
        ):
            yield backend

    def failing_with(self, status: int, remote: RemoteOptions, stack: ExitStack) -> tuple[Any, Tries]:
        url, tries = stack.enter_context(status_server(status))
        return self.backend_class(url, model="m", retry=retry_of(remote), cooldown=0), tries


class TestSGLangDiffusionContract(TestOmniContract):
    spec = "sglang-diffusion:127.0.0.1:9#m"
    backend_class = SGLangDiffusionBackend


# --- OpenAI images --------------------------------------------------------------------------------------


class TestOpenAIImagesContract(ImageBackendContract):
    spec = "openai-images:gpt-image-1"
    required_key_envs = ("OPENAI_API_KEY",)  # api.openai.com needs one
    honours_seed = False  # the API has no seed

    @pytest.fixture
    def backend(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIImagesBackend]:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        with (
            openai_images_server(KEY) as (_, url),
            OpenAIImagesBackend("local-model", base_url=url) as backend,
        ):
            yield backend

    def failing_with(self, status: int, remote: RemoteOptions, stack: ExitStack) -> tuple[Any, Tries]:
        url, tries = stack.enter_context(status_server(status))
        return OpenAIImagesBackend("local-model", base_url=f"{url}/v1", remote=remote), tries


# --- OpenAI-compatible chat -----------------------------------------------------------------------------


def chat_reply(index: int, call: openai_chat.Call) -> openai_chat.Reply:
    """A reply that depends only on what was asked, as greedy decoding does."""
    texts = [
        p.get("text", "<image>") for m in call.body["messages"] for p in m["content"] if isinstance(p, dict)
    ]
    return openai_chat.ok(f"answer {digest_colour(*texts)}")


class TestOpenAIVLMContract(VLMBackendContract):
    spec = "openai:http://127.0.0.1:9/v1#m"

    @pytest.fixture
    def backend(self) -> Iterator[OpenAIVLMBackend]:
        with openai_chat.ScriptedServer(chat_reply) as server, OpenAIVLMBackend(server.url, "m") as backend:
            yield backend

    def failing_with(self, status: int, remote: RemoteOptions, stack: ExitStack) -> tuple[Any, Tries]:
        url, tries = stack.enter_context(status_server(status))
        return OpenAIVLMBackend(f"{url}/v1", "m", retry=retry_of(remote), cooldown=0), tries


# --- Gemini (google-genai SDK) ----------------------------------------------------------------------------


@dataclass
class Part:
    text: str | None = None
    inline_data: Any = None
    thought: bool = False


@dataclass
class FakeGemini:
    """``client.models.generate_content`` answering from the request alone, or raising the SDK's own
    ``APIError`` with ``status`` (import skipped when the optional SDK is absent)."""

    status: int | None = None
    calls: list[Any] = field(default_factory=list)

    @property
    def models(self) -> FakeGemini:
        return self

    def generate_content(self, *, model: str, contents: Any, config: Any = None) -> Any:
        self.calls.append(contents)
        if self.status is not None:
            errors = pytest.importorskip("google.genai.errors")
            body = {
                "error": {"code": self.status, "message": f"scripted {self.status}", "status": "SCRIPTED"}
            }
            raise errors.APIError(self.status, body)
        if "image_config" not in config:  # chat
            return type(
                "Response", (), {"text": f"answer {digest_colour(repr(contents))}", "candidates": []}
            )()
        w, h = (int(v) * 32 for v in config["image_config"]["aspect_ratio"].split(":"))
        colour = digest_colour(contents[0], config["seed"], len(contents))
        blob = type("Blob", (), {"data": png(Image.new("RGB", (w, h), colour)), "mime_type": "image/png"})()
        content = type("Content", (), {"parts": [Part(inline_data=blob)]})()
        return type("Response", (), {"candidates": [type("C", (), {"content": content})()]})()


class GeminiKind:
    """Both Gemini kinds: built on :class:`FakeGemini`; ``make`` builds the backend around a client."""

    required_key_envs: ClassVar[tuple[str, ...]] = GEMINI_KEYS

    def make(self, client: FakeGemini, remote: RemoteOptions) -> Any:
        raise NotImplementedError

    @pytest.fixture
    def backend(self) -> Iterator[Any]:
        with self.make(FakeGemini(), RemoteOptions()) as backend:
            yield backend

    def failing_with(self, status: int, remote: RemoteOptions, stack: ExitStack) -> tuple[Any, Tries]:
        client = FakeGemini(status)
        return self.make(client, remote), lambda: len(client.calls)

    def test_a_key_in_the_named_variable_is_accepted(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The SDK is an optional extra (absent where only `.[dev,demo]` is installed): a stand-in
        ``google.genai`` module takes the client, so the key the variable names must reach it."""
        keys: list[str] = []

        class Client:
            def __init__(self, *, api_key: str, http_options: Any = None) -> None:
                keys.append(api_key)
                self.models = FakeGemini()

            def close(self) -> None:
                pass

        install_genai_client(monkeypatch, Client)
        super().test_a_key_in_the_named_variable_is_accepted(monkeypatch)  # type: ignore[misc]
        assert keys == ["contract-key"]


class TestGeminiVLMContract(GeminiKind, VLMBackendContract):
    spec = "gemini:gemini-2.5-pro"

    def make(self, client: FakeGemini, remote: RemoteOptions) -> GeminiVLMBackend:
        return GeminiVLMBackend("gemini-2.5-pro", client=client, retry=retry_of(remote), sleep=lambda _: None)


class TestGeminiImageContract(GeminiKind, ImageBackendContract):
    spec = "gemini-image:nano-banana"

    def make(self, client: FakeGemini, remote: RemoteOptions) -> GeminiImageBackend:
        return GeminiImageBackend("nano-banana", client=client, remote=remote, sleep=lambda _: None)


# --- the CLI: a missing key exits 2 with every remote kind --------------------------------------------------

IMAGE_JUDGE = "openai:http://127.0.0.1:9/v1#j"
REMOTE_ROLES = {  # kind -> (generator, judge) of a `reward` run in which that kind is loaded
    "http": ("http:127.0.0.1:9", IMAGE_JUDGE),
    "vllm-omni": ("vllm-omni:127.0.0.1:9#m", IMAGE_JUDGE),
    "sglang-diffusion": ("sglang-diffusion:127.0.0.1:9#m", IMAGE_JUDGE),
    "openai-images": ("openai-images:gpt-image-1", IMAGE_JUDGE),
    "gemini-image": ("gemini-image:nano-banana", IMAGE_JUDGE),
    "openai": ("http:127.0.0.1:9", "openai:http://127.0.0.1:9/v1#j"),
    "gemini": ("http:127.0.0.1:9", "gemini:gemini-2.5-pro"),
}
NEEDS_A_KEY_BY_DEFAULT = {
    "openai-images": "OPENAI_API_KEY",
    "gemini-image": "GEMINI_API_KEY",
    "gemini": "GEMINI_API_KEY",
}


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["interleave-thinker", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0), capsys.readouterr().err


def reward_args(tmp_path: Path, generator: str, judge: str) -> list[str]:
    out = str(tmp_path / "o.jsonl")
    return [
        "reward",
        "--input",
        str(rollout(tmp_path)),
        "--generator",
        generator,
        "--judge",
        judge,
        "--out",
        out,
    ]


def test_a_config_error_is_a_usage_error() -> None:
    assert issubclass(ConfigError, USAGE_ERRORS)


@pytest.mark.parametrize("kind", sorted(REMOTE_ROLES))
def test_an_empty_named_key_variable_exits_2(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(UNSET_KEY_ENV, raising=False)
    config = tmp_path / "c.yaml"
    config.write_text(f"remote:\n  api_key_env: {UNSET_KEY_ENV}\n")
    code, err = run_cli(
        [*reward_args(tmp_path, *REMOTE_ROLES[kind]), "--config", str(config)], monkeypatch, capsys
    )
    assert code == 2, err
    assert f"remote.api_key_env names {UNSET_KEY_ENV}" in err


@pytest.mark.parametrize("kind", sorted(NEEDS_A_KEY_BY_DEFAULT))
def test_a_service_key_that_is_not_set_exits_2_naming_it(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for env in ("OPENAI_API_KEY", *GEMINI_KEYS):
        monkeypatch.delenv(env, raising=False)
    code, err = run_cli(reward_args(tmp_path, *REMOTE_ROLES[kind]), monkeypatch, capsys)
    assert code == 2, err
    assert f"{kind}:" in err and f"set {NEEDS_A_KEY_BY_DEFAULT[kind]}" in err
