"""`serve vlm`: the OpenAI-compatible server, in-process over a recording backend and as a real
subprocess over the tiny planner, always reached over HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Unpack

import httpx
import pytest
from PIL import Image

from interleave_thinker.backends.protocols import ChatOptions, Message, VLMBatchMixin
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.specs import load_vlm_backend
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.core.errors import BackendError
from interleave_thinker.server.limits import read_timeout_protocol
from interleave_thinker.server.vlm_service import VLMLimits, create_app
from interleave_thinker.testing.doubles import hostile
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.doubles.stoppable import ModelBackend
from tests.helpers import input_errors
from tests.helpers.common import cli_command
from tests.helpers.memory import needs_proc, peak_growth_mb, reset_peak
from tests.helpers.served import (
    Engine,
    InProcessServer,
    offline_env,
    post_by_hand,
    stop_all,
    wait_until_generating,
)

FAST = RetrySettings(max_retries=2, backoff_base=0.01, backoff_max=0.05, timeout=30.0)


class RecordingBackend(VLMBatchMixin):
    """Replies ``reply``, records what it got, and measures how many calls overlapped."""

    def __init__(self, reply: str = "recorded", *, fail: bool = False, hold: float = 0.0) -> None:
        self.name = "recording"
        self.reply = reply
        self.fail = fail
        self.hold = hold
        self.calls: list[tuple[list[Message], int, float | None]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.hold)
            self.calls.append(
                (messages, options.get("max_new_tokens", 4096), options.get("temperature", 0.0))
            )
            if self.fail:
                raise BackendError("recording: generation failed: out of memory")
            return self.reply
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture
def recording() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
def served(recording: RecordingBackend) -> Iterator[InProcessServer]:
    with InProcessServer(recording) as server:
        yield server


@pytest.fixture
def http(served: InProcessServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        yield client


def data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def noise(size: tuple[int, int], seed: int) -> Image.Image:
    rng = random.Random(seed)
    return Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))


# -- the app, in-process ------------------------------------------------------------------------


def test_health_and_models(http: httpx.Client) -> None:
    assert http.get("/health").json() == {"status": "ok", "cancelled": 0}
    models = http.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["rec"]


def test_chat_completion_shape_and_conversion(http: httpx.Client, recording: RecordingBackend) -> None:
    picture = noise((48, 40), 1)
    body = {
        "model": "rec",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": data_url(picture)}},
                    {
                        "type": "image_url",
                        "image_url": data_url(picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)),
                    },
                ],
            },
        ],
        "max_tokens": 50,
        "max_completion_tokens": 20,
        "temperature": 0.7,
        "top_p": 0.9,
    }
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    reply = response.json()
    assert reply["object"] == "chat.completion"
    assert reply["model"] == "rec"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "recorded"}
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert "usage" in reply
    [(messages, max_new_tokens, temperature)] = recording.calls
    assert (max_new_tokens, temperature) == (20, 0.7)  # max_completion_tokens wins over max_tokens
    assert messages[0] == {"role": "system", "content": [{"type": "text", "text": "be brief"}]}
    parts = messages[1]["content"]
    assert [p["type"] for p in parts] == ["text", "image", "image"]
    assert parts[1]["image"].size == (48, 40)
    assert parts[1]["image"].tobytes() == picture.tobytes()
    assert parts[2]["image"].tobytes() == picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT).tobytes()


def test_defaults_checkpoint_decoding_and_max_tokens(http: httpx.Client, recording: RecordingBackend) -> None:
    """No temperature: the checkpoint's own generation config (None), as vLLM and agents.decoding do."""
    response = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200
    [(messages, max_new_tokens, temperature)] = recording.calls
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert (max_new_tokens, temperature) == (4096, None)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                    }
                ]
            },
            400,
            "only base64 data URLs",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}],
                    }
                ]
            },
            400,
            "not a readable image",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}
                        ],
                    }
                ]
            },
            400,
            "not a readable image",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            400,
            "unsupported content part type",
        ),
        (
            {"model": "other", "messages": [{"role": "user", "content": "x"}]},
            404,
            "The model `other` does not exist",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}},
            400,
            "stream_options: only allowed with stream=true",
        ),
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
    ],
    ids=[
        "remote-url",
        "bad-base64",
        "not-an-image",
        "part-type",
        "model",
        "stream-options",
        "empty",
        "max-tokens",
    ],
)
def test_bad_requests_are_openai_shaped_4xx(
    http: httpx.Client, recording: RecordingBackend, body: dict[str, Any], status: int, needle: str
) -> None:
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert needle in error["message"]
    assert error["code"] == status
    assert recording.calls == []


def test_backend_failure_is_a_500_the_client_retries() -> None:
    failing = RecordingBackend(fail=True)
    with (
        InProcessServer(failing) as server,
        OpenAIVLMBackend(f"{server.url}/v1", "rec", retry=FAST) as client,
        pytest.raises(BackendError) as info,
    ):
        client.chat([{"role": "user", "content": [{"type": "text", "text": "x"}]}])
    assert len(failing.calls) == FAST.max_retries + 1
    assert "HTTP 500: recording: generation failed: out of memory" in str(info.value)


def test_model_calls_are_serialized() -> None:
    slow = RecordingBackend(hold=0.05)
    with InProcessServer(slow) as server, OpenAIVLMBackend(f"{server.url}/v1", "rec", retry=FAST) as client:
        conversations = [[{"role": "user", "content": [{"type": "text", "text": str(n)}]}] for n in range(6)]
        assert client.chat_batch(conversations) == ["recorded"] * 6
    assert len(slow.calls) == 6
    assert slow.max_in_flight == 1


def test_openai_backend_round_trip_in_process(recording: RecordingBackend, served: InProcessServer) -> None:
    picture = noise((33, 65), 2)
    messages: list[Message] = [
        {
            "role": "user",
            "content": [{"type": "image", "image": picture}, {"type": "text", "text": "describe"}],
        }
    ]
    with OpenAIVLMBackend(f"{served.url}/v1", retry=FAST) as client:
        assert client.chat(messages, max_new_tokens=7, temperature=0) == "recorded"
        assert client.model == "rec"  # discovered from /v1/models
    [(received, max_new_tokens, temperature)] = recording.calls
    assert (max_new_tokens, temperature) == (7, 0.0)
    assert received[0]["content"][0]["image"].tobytes() == picture.tobytes()
    assert received[0]["content"][1] == {"type": "text", "text": "describe"}


def test_help_points_to_vllm_for_production() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "interleave_thinker", "serve", "vlm", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "vllm serve" in result.stdout
    assert "CPU users and tests" in result.stdout
    assert "[default: 127.0.0.1]" in result.stdout


# -- the real command over the tiny planner, as a subprocess ------------------------------------


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m interleave_thinker serve vlm --model tiny:planner`` on a free port, same tiny dir as the tests."""
    home = tmp_path_factory.mktemp("serve-home")
    # offline_env's tiny dir: what conftest's isolated_home sets, which module fixtures run before
    env = {**os.environ, **offline_env(), "INTERLEAVE_THINKER_HOME": str(home)}
    args = ["serve", "vlm", "--model", "tiny:planner", "--log-level", "warning"]
    server = Engine("serve vlm", cli_command(*args), home / "server.log", env)
    try:
        server.wait_ready(within=240)
        yield server.url
    finally:
        stop_all([server])


@pytest.mark.slow
def test_tiny_round_trip_equals_local_greedy(tiny_server: str) -> None:
    messages: list[Message] = [
        {"role": "system", "content": [{"type": "text", "text": "You are a planner."}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": noise((64, 64), 3)},
                {"type": "text", "text": "Plan three steps for a red kite over a beach."},
                {"type": "image", "image": noise((200, 150), 4), "max_pixels": 64 * 64},
            ],
        },
    ]
    local = load_vlm_backend("tiny:planner")
    expected = local.chat(messages, max_new_tokens=24, temperature=0.0)
    with OpenAIVLMBackend(f"{tiny_server}/v1", retry=FAST) as remote:
        got = remote.chat(messages, max_new_tokens=24, temperature=0.0)
        assert remote.model == "tiny:planner"  # discovered: the served name defaults to the spec
    assert expected
    assert got == expected
    assert got.encode() == expected.encode()


@pytest.mark.slow
def test_tiny_server_reports_usage_and_models(tiny_server: str) -> None:
    models = httpx.get(f"{tiny_server}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny:planner"]
    body = {"model": "tiny:planner", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
    reply = httpx.post(f"{tiny_server}/v1/chat/completions", json=body, timeout=120).json()
    usage = reply["usage"]
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert isinstance(reply["choices"][0]["message"]["content"], str)


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [1, 5])
def test_usage_counts_the_ids_the_model_read_and_wrote_as_vllm_does(
    tiny_server: str, max_tokens: int
) -> None:
    """Prompt tokens: the chat template and the image tokens included (what the processor gives the
    model); completion tokens: what it generated, never over max_tokens; "length" only when it hit it."""
    from transformers import AutoProcessor

    from interleave_thinker.tiny.models import ensure_tiny_model

    image = noise((64, 48), 5)
    question = "Plan three steps for a red kite."
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data_url(image)}},
        {"type": "text", "text": question},
    ]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}
    reply = httpx.post(f"{tiny_server}/v1/chat/completions", json=body, timeout=120).json()
    processor = AutoProcessor.from_pretrained(ensure_tiny_model("planner"))
    conversation = [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}
    ]
    ids = processor.apply_chat_template(
        conversation, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )["input_ids"]
    usage, finish = reply["usage"], reply["choices"][0]["finish_reason"]
    assert usage["prompt_tokens"] == ids.shape[1]
    assert 1 <= usage["completion_tokens"] <= max_tokens
    assert finish == ("length" if usage["completion_tokens"] == max_tokens else "stop")
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.slow
@pytest.mark.parametrize(("route", "shape", "request_kwargs", "status", "says"), input_errors.rows("vlm"))
def test_what_the_model_refuses_is_a_4xx_with_an_error_body(
    tiny_server: str, route: str, shape: str, request_kwargs: dict[str, Any], status: int, says: str
) -> None:
    """The VLM's rows of the input-error table both servers answer (tests/helpers/input_errors.py)."""
    reply = httpx.post(f"{tiny_server}{route}", timeout=120, **request_kwargs)
    input_errors.assert_refused(reply, shape, status, says)


# -- limits: max_tokens, body, pixels, slow clients, disconnects ---------------------------------


class LimitedServer(AppServer):
    def __init__(self, backend: Any, limits: VLMLimits, read_timeout: float = 30.0) -> None:
        super().__init__(create_app(backend, "rec", limits), http=read_timeout_protocol(read_timeout))


def png_claiming(width: int, height: int) -> bytes:
    """A 1x1 PNG whose IHDR (with a correct CRC) claims ``width`` x ``height``."""
    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    return bytes(data)


class GatedBackend(VLMBatchMixin):
    """Holds every call until ``release`` is set; records the images each call was given."""

    name = "gated"

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.images: list[list[Any]] = []

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        self.images.append([p["image"] for m in messages for p in m["content"] if p["type"] == "image"])
        self.started.set()
        assert self.release.wait(60)
        return "done"


def chat_with_images(count: int, png: bytes) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}}] * count
    return {"messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "what is it?"}]}]}


def test_more_images_than_the_limit_is_a_400_before_any_is_read() -> None:
    backend = GatedBackend()
    backend.release.set()
    with LimitedServer(backend, VLMLimits(max_images=2)) as server:
        over = httpx.post(
            f"{server.url}/v1/chat/completions", json=chat_with_images(3, b"not read"), timeout=30
        )
        fine = httpx.post(
            f"{server.url}/v1/chat/completions", json=chat_with_images(2, png_bytes()), timeout=30
        )
    assert over.status_code == 400, over.text
    message = over.json()["error"]["message"]
    assert "3 images, over this server's limit of 2 per request (serve vlm --max-images)" in message
    assert fine.status_code == 200 and [len(i) for i in backend.images] == [2]
    assert all(isinstance(i, Image.Image) and i.size == (8, 8) for i in backend.images[0])


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_requests_beyond_the_wait_queue_get_429_with_a_retry_hint() -> None:
    """One runs, ``max_waiting`` wait; of two more sent at once, exactly one is turned away, whatever
    the order they arrive in, before its body is read; the others are answered once the model is free."""
    backend = GatedBackend()
    body = {"messages": [{"role": "user", "content": "x"}]}
    with LimitedServer(backend, VLMLimits(max_waiting=1)) as server, ThreadPoolExecutor(3) as pool:
        post = functools.partial(httpx.post, f"{server.url}/v1/chat/completions", json=body, timeout=60)
        running = pool.submit(post)
        assert backend.started.wait(30)
        others = [pool.submit(post), pool.submit(post)]
        first = next(as_completed(others))
        turned_away = first.result()
        backend.release.set()
        answered = [running.result(), *(f.result() for f in others if f is not first)]
    assert turned_away.status_code == 429, turned_away.text
    assert int(turned_away.headers["Retry-After"]) >= 1
    error = turned_away.json()["error"]
    assert (error["code"], error["type"]) == (429, "rate_limit_error")
    assert "serve vlm --max-waiting" in error["message"]
    assert [r.status_code for r in answered] == [200, 200]


WAITING_BOUND_MB = 64
"""What three waiting requests of 8 images of 2048² (a few KB each on the wire) may add to the server's
peak: their bodies, not the 300 MB of their decoded pixels."""


@needs_proc
def test_waiting_requests_hold_their_bodies_not_their_pixels() -> None:
    backend = GatedBackend()
    body = chat_with_images(8, hostile.bomb_png(2048))
    app = create_app(backend, "rec")
    with AppServer(app) as server, ThreadPoolExecutor(4) as pool:
        post = functools.partial(httpx.post, f"{server.url}/v1/chat/completions", json=body, timeout=120)
        running = pool.submit(post)
        assert backend.started.wait(60)
        start = reset_peak()
        waiting = [pool.submit(post) for _ in range(3)]
        deadline = time.monotonic() + 60
        while app.state.gate.waiting < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        grown = peak_growth_mb(start)
        queued = app.state.gate.waiting
        backend.release.set()
        replies = [running.result(), *(f.result() for f in waiting)]
    print(f"peak grew {grown:.1f} MB with 3 requests of 8 images of 2048x2048 waiting")
    assert queued == 3
    assert [r.status_code for r in replies] == [200] * 4
    assert grown < WAITING_BOUND_MB


def test_requests_over_the_limits_get_400_or_413() -> None:
    recording = RecordingBackend()
    limits = VLMLimits(max_tokens=100, max_body_bytes=20_000, max_pixels=64 * 64)
    with LimitedServer(recording, limits) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        text = [{"role": "user", "content": "hi"}]
        over = http.post("/v1/chat/completions", json={"messages": text, "max_tokens": 1_000_000})
        assert over.status_code == 400
        assert "over this server's limit of 100 (serve vlm --max-tokens)" in over.json()["error"]["message"]
        big = {"messages": [{"role": "user", "content": "x" * 30_000}]}
        assert http.post("/v1/chat/completions", json=big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(30):
                yield b"y" * 1000
            yield b'"}]}'

        streamed = http.post("/v1/chat/completions", content=chunks())
        assert streamed.status_code == 413
        assert "limit of 20000 bytes" in streamed.json()["error"]["message"]
        bomb = "data:image/png;base64," + base64.b64encode(png_claiming(5000, 5000)).decode()
        content = [{"type": "image_url", "image_url": {"url": bomb}}]
        refused = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": content}]})
        assert refused.status_code == 400
        assert "5000x5000 = 25000000 pixels, over this server's limit of 4096" in refused.text
        ok = http.post("/v1/chat/completions", json={"messages": text, "max_tokens": 100})
        assert ok.status_code == 200
    assert [max_new for _, max_new, _ in recording.calls] == [100]


def test_a_client_that_disconnects_stops_its_generation_and_frees_the_slot() -> None:
    backend = ModelBackend()
    with LimitedServer(backend, VLMLimits(max_tokens=100_000)) as server:
        body = json.dumps({"messages": [{"role": "user", "content": "go"}], "max_tokens": 100_000}).encode()
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as raw:
            post_by_hand(raw, body)
            wait_until_generating(backend.model)
        assert backend.model.finished.wait(60), "the generation went on after its client left"
        assert backend.model.steps < 100_000
        with httpx.Client(base_url=server.url, timeout=60) as http:
            reply = http.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "a"}], "max_tokens": 3}
            )
            assert reply.json()["choices"][0]["message"]["content"] == "xxx"
            assert http.get("/health").json()["cancelled"] == 1


def test_a_client_that_never_finishes_its_headers_is_disconnected() -> None:
    with LimitedServer(RecordingBackend(), VLMLimits(), read_timeout=0.5) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as raw:
            raw.settimeout(20)
            raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            for _ in range(3):  # a byte now and then must not keep it open
                time.sleep(0.2)
                raw.sendall(b"X")
            assert raw.recv(1024) == b""  # closed by the server
        with socket.create_connection((host, int(port))) as raw:
            raw.settimeout(20)
            raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            assert raw.recv(1024) == b""  # the body stalled


@pytest.mark.slow
def test_sigterm_stops_a_long_generation_within_seconds(tmp_path: Path) -> None:
    env = {**os.environ, **offline_env()}
    args = ["serve", "vlm", "--model", "tiny:planner", "--max-tokens", "1000000"]
    server = Engine("serve vlm", cli_command(*args), tmp_path / "server.log", env)
    try:
        server.wait_ready(within=240)
        body = {"messages": [{"role": "user", "content": "go on forever"}], "max_tokens": 1_000_000}
        thread = threading.Thread(
            target=lambda: httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300),
            daemon=True,
        )
        thread.start()
        time.sleep(2)
        server.process.terminate()
        assert server.process.wait(30) == 0, server.log.read_text()  # without the fix: minutes of generation
    finally:
        stop_all([server])
