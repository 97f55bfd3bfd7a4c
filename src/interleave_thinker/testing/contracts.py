"""Contract suites every backend of a role passes, in the style of diffusers' shared tester mixins.

Why: each backend had its own tests, and nothing said what *every* generator or chat model promises to
the loop, the scheduler and the rewards. A backend's test class inherits the contract and supplies its
backend; the contract's tests then run against it::

    class TestHTTPContract(ImageBackendContract):
        spec = "http:127.0.0.1:9"

        @pytest.fixture
        def backend(self, edit_server): ...

        def failing_with(self, status, remote, stack): ...   # remote kinds only

What is checked: the protocol, the requested size, seed determinism (same request, same pixels; other
seed, other pixels), reference images taken up to the declared cap and refused beyond, batches equal
to single calls, concurrent calls equal to sequential ones, failures
as :class:`BackendError`, ``close`` and the context manager, and for remote kinds the one status rule
(501 final after one try, 503 retried) and a missing API key as :class:`ConfigError` naming the
variable (the CLI exits 2 on it). Imported by tests only; it imports pytest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar

import pytest
from PIL import Image

from interleave_thinker.backends.protocols import ImageBackend, ImageRequest, Message, VLMBackend
from interleave_thinker.backends.specs import BackendOptions, load_image_backend, load_vlm_backend
from interleave_thinker.backends.wrapping import reference_cap
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request

UNSET_KEY_ENV = "INTERLEAVE_THINKER_CONTRACT_UNSET_KEY"
"""A variable no machine sets: named in ``remote.api_key_env``, it must make every remote kind refuse."""
FAST_REMOTE = RemoteOptions(max_retries=2, backoff_base=0.0, backoff_max=0.0, timeout=10.0, cooldown=0.0)
Tries = Callable[[], int]


@contextmanager
def status_server(status: int) -> Iterator[tuple[str, Tries]]:
    """A server on 127.0.0.1 that answers every request with ``status`` and an OpenAI-style error body;
    yields its URL and the number of requests it has received."""
    seen: list[str] = []

    def handle(request: Request) -> Reply:
        seen.append(request.path)
        return Reply(status, {"error": {"message": f"scripted {status}", "type": "server_error"}})

    with LocalServer(handle) as server:
        yield server.url, lambda: len(seen)


class _BackendContract:
    """What every backend promises regardless of its role; see the module doc."""

    spec: ClassVar[str | None] = None
    """A spec of this kind that builds without any network (remote kinds): the key tests load it."""
    required_key_envs: ClassVar[tuple[str, ...]] = ()
    """The variables a key is read from when the service needs one even without ``remote.api_key_env``."""
    role: ClassVar[str] = "image"

    def load(self, spec: str, options: BackendOptions) -> Any:
        if self.role == "image":
            return load_image_backend(spec, options)
        return load_vlm_backend(spec, options)

    def failing_with(self, status: int, remote: RemoteOptions, stack: ExitStack) -> tuple[Any, Tries]:
        """A backend whose service answers every call with ``status``, and its try counter (remote kinds)."""
        pytest.skip("a local backend has no HTTP status")

    def call(self, backend: Any) -> Any:
        raise NotImplementedError

    def failing_call(self, backend: Any) -> Callable[[], object] | None:
        """A call on ``backend`` that must fail (local kinds; remote ones fail by status below)."""
        return None

    def test_a_failure_is_a_backend_error_naming_the_backend(self, backend: Any) -> None:
        call = self.failing_call(backend)
        if call is None:
            pytest.skip("no failing call is scripted for this kind (remote kinds: see the status test)")
        with pytest.raises(BackendError) as info:
            call()
        assert str(info.value).startswith(backend.name), str(info.value)

    def test_close_twice_and_context_manager(self, backend: Any) -> None:
        with backend as entered:
            assert entered is backend
        backend.close()  # a second close is harmless

    def test_501_is_final_and_503_is_retried(self) -> None:
        """One rule for every remote backend: 501 ends the call after one try, other 5xx are retried."""
        for status, tries in ((501, 1), (503, FAST_REMOTE.max_retries + 1), (400, 1)):
            with ExitStack() as stack:
                backend, counter = self.failing_with(status, FAST_REMOTE, stack)
                stack.callback(backend.close)
                with pytest.raises(BackendError, match=str(status)):
                    self.call(backend)
                assert counter() == tries, (status, counter())

    def test_missing_key_is_a_config_error_naming_the_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.spec is None:
            pytest.skip("a local backend reads no API key")
        monkeypatch.delenv(UNSET_KEY_ENV, raising=False)
        options = BackendOptions(remote=RemoteOptions(api_key_env=UNSET_KEY_ENV))
        with pytest.raises(ConfigError, match=f"remote.api_key_env names {UNSET_KEY_ENV}"):
            self.load(self.spec, options)
        if self.required_key_envs:
            for env in self.required_key_envs:
                monkeypatch.delenv(env, raising=False)
            with pytest.raises(ConfigError, match=" or ".join(self.required_key_envs)):
                self.load(self.spec, BackendOptions())

    def test_a_key_in_the_named_variable_is_accepted(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.spec is None:
            pytest.skip("a local backend reads no API key")
        monkeypatch.setenv(UNSET_KEY_ENV, "contract-key")
        with self.load(self.spec, BackendOptions(remote=RemoteOptions(api_key_env=UNSET_KEY_ENV))) as backend:
            assert backend.name


class ImageBackendContract(_BackendContract):
    """Tests every :class:`ImageBackend` passes; a subclass provides the ``backend`` fixture."""

    honours_seed: ClassVar[bool] = True
    """False for services without a seed (OpenAI images; Gemini takes one but promises nothing)."""
    exact_batches: ClassVar[bool] = True
    """False where a batched call changes pixels by float rounding (diffusers)."""
    can_edit: ClassVar[bool] = True
    steps: ClassVar[int | None] = 2

    def request(self, prompt: str = "a red cube", **changes: Any) -> ImageRequest:
        fields: dict[str, Any] = {"width": 48, "height": 32, "seed": 3, "steps": self.steps, **changes}
        return ImageRequest(prompt, **fields)

    def call(self, backend: ImageBackend) -> Image.Image:
        return backend.generate(self.request())

    def same(self, a: Image.Image, b: Image.Image) -> bool:
        return a.size == b.size and a.convert("RGB").tobytes() == b.convert("RGB").tobytes()

    def test_follows_the_protocol(self, backend: ImageBackend) -> None:
        assert isinstance(backend, ImageBackend)
        assert isinstance(backend.name, str) and backend.name

    def test_the_requested_size_is_honoured(self, backend: ImageBackend) -> None:
        wide = backend.generate(self.request(width=48, height=32))
        tall = backend.generate(self.request(width=32, height=48))
        assert (wide.size, tall.size) == ((48, 32), (32, 48))
        assert isinstance(wide, Image.Image) and wide.mode in ("RGB", "RGBA", "L")
        if self.can_edit:
            source = Image.new("RGB", (64, 64), (10, 120, 200))  # FLUX.2 edits need 64 px or more
            assert backend.generate(self.request("make it red", image=source)).size == (48, 32)

    def test_the_same_request_gives_the_same_image_and_another_seed_another(
        self, backend: ImageBackend
    ) -> None:
        if not self.honours_seed:
            pytest.skip("this service takes no seed")
        first, again = backend.generate(self.request(seed=11)), backend.generate(self.request(seed=11))
        other = backend.generate(self.request(seed=12))
        assert self.same(first, again)
        assert not self.same(first, other)

    def test_a_batch_equals_single_calls_in_order(self, backend: ImageBackend) -> None:
        requests = [self.request(f"prompt {i}", seed=i) for i in range(3)] + [
            self.request(width=32, height=48)
        ]
        batch = backend.generate_batch(requests)
        assert [image.size for image in batch] == [(r.width, r.height) for r in requests]
        if self.honours_seed and self.exact_batches:
            singles = [backend.generate(r) for r in requests]
            assert all(self.same(a, b) for a, b in zip(batch, singles, strict=True))

    def test_references_are_taken_up_to_the_cap_and_refused_beyond(self, backend: ImageBackend) -> None:
        """Every backend declares ``max_references`` (none: 0); it takes that many beside the edited
        image and refuses one more with a :class:`ConfigError` naming itself, before any call."""
        if not self.can_edit:
            pytest.skip("this backend does not edit")
        cap = reference_cap(backend)
        source = Image.new("RGB", (64, 64), (10, 120, 200))
        colours = [(200, 0, 0), (0, 200, 0), (0, 0, 200)]
        references = tuple(Image.new("RGB", (64, 64), colours[i % 3]) for i in range(cap + 1))
        if cap:
            taken = backend.generate(self.request("keep it", image=source, references=references[:cap]))
            assert taken.size == (48, 32)
        with pytest.raises(ConfigError) as info:
            backend.generate(self.request("keep it", image=source, references=references))
        assert str(info.value).startswith(f"{backend.name} takes "), str(info.value)
        assert "loop.references" in str(info.value)

    def test_concurrent_calls_equal_sequential_ones(self, backend: ImageBackend) -> None:
        requests = [self.request(f"thread {i}", seed=100 + i) for i in range(6)]
        with ThreadPoolExecutor(max_workers=3) as pool:
            together = list(pool.map(backend.generate, requests))
        assert [image.size for image in together] == [(48, 32)] * len(requests)
        if self.honours_seed:
            alone = [backend.generate(r) for r in requests]
            assert all(self.same(a, b) for a, b in zip(together, alone, strict=True))


class VLMBackendContract(_BackendContract):
    """Tests every :class:`VLMBackend` passes; a subclass provides the ``backend`` fixture."""

    role: ClassVar[str] = "vlm"
    max_new_tokens: ClassVar[int] = 8

    def conversation(self, text: str = "Describe the picture.", image: bool = True) -> list[Message]:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        if image:
            content.insert(0, {"type": "image", "image": Image.new("RGB", (40, 30), (200, 30, 30))})
        system = [{"type": "text", "text": "You answer briefly."}]
        return [{"role": "system", "content": system}, {"role": "user", "content": content}]

    def call(self, backend: VLMBackend) -> str:
        return backend.chat(self.conversation(), max_new_tokens=self.max_new_tokens)

    def test_follows_the_protocol(self, backend: VLMBackend) -> None:
        assert isinstance(backend, VLMBackend)
        assert isinstance(backend.name, str) and backend.name
        assert isinstance(self.call(backend), str)

    def test_greedy_replies_are_deterministic(self, backend: VLMBackend) -> None:
        first, again = self.call(backend), self.call(backend)
        assert first == again

    def test_a_batch_equals_single_calls_in_order(self, backend: VLMBackend) -> None:
        conversations = [self.conversation(f"question {i}", image=i % 2 == 0) for i in range(3)]
        batch = backend.chat_batch(conversations, max_new_tokens=self.max_new_tokens)
        singles = [backend.chat(c, max_new_tokens=self.max_new_tokens) for c in conversations]
        assert batch == singles

    def test_concurrent_calls_equal_sequential_ones(self, backend: VLMBackend) -> None:
        conversations = [self.conversation(f"thread {i}") for i in range(6)]
        with ThreadPoolExecutor(max_workers=3) as pool:
            together = list(
                pool.map(lambda c: backend.chat(c, max_new_tokens=self.max_new_tokens), conversations)
            )
        alone = [backend.chat(c, max_new_tokens=self.max_new_tokens) for c in conversations]
        assert together == alone


def without_env(*names: str) -> dict[str, str]:
    """The environment without ``names`` (for a CLI run that must find no key)."""
    return {k: v for k, v in os.environ.items() if k not in names}
