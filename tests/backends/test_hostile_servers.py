"""Served backends against a hostile server (``testing.doubles.hostile``) on 127.0.0.1: decompression
bombs, replies dripped one byte at a time, huge and inflating replies, lone surrogates. Every call ends
in a one-line :class:`BackendError` within ``remote.deadline`` + 2 s, on the thread path and inside a
batch's event loop, and an 8-request batch against 12000² replies stays under 1 GB of RSS."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.specs import BackendOptions, load_image_backend, load_vlm_backend
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.core import green
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError
from interleave_thinker.testing.doubles import hostile, scripted_models
from interleave_thinker.testing.doubles.server import LocalServer
from tests.helpers.memory import needs_proc, peak_growth_mb, reset_peak

T = TypeVar("T")
DEADLINE = 3.0
OPTIONS = BackendOptions(
    remote=RemoteOptions(
        timeout=1.0, deadline=DEADLINE, max_retries=2, backoff_base=0.05, backoff_max=0.1, cooldown=0.0
    )
)
IMAGE_SPECS = {
    "vllm-omni": "vllm-omni:{url}#hostile",
    "openai-images": "openai-images:gpt-image-1@{url}/v1",
    "http": "http:{url}",
}
SAYS = {
    "bomb": "remote.max_image_pixels",
    "oversized": "the server did not honour the size",
    "drip": "deadline of 3s passed",
    "huge": "remote.max_reply_mb",
    "inflating": "remote.max_reply_mb",
    "surrogate": "cut off",
}


def on_path(path: str, fn: Callable[[], T]) -> T:
    """``fn()`` in this thread, or in a greenlet on an event loop as a batch request runs it."""
    if path == "thread":
        return fn()

    async def main() -> T:
        try:
            return await green.run_green(fn)
        finally:
            await green.finish_loop()

    return asyncio.run(main())


def refused(path: str, fn: Callable[[], Any]) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        on_path(path, fn)
    return str(info.value), time.monotonic() - start


def assert_one_clean_line(message: str) -> None:
    assert "\n" not in message
    message.encode("utf-8")  # no lone surrogate: printable and storable as it is


def assert_held_to_bound(path: str, shape: str, backend: Any, call: Callable[[], Any]) -> None:
    """The call is refused within the deadline, in one clean line that says what the server did."""
    try:
        message, elapsed = refused(path, call)
    finally:
        backend.close()
    assert elapsed <= DEADLINE + 2, (elapsed, message)
    assert SAYS[shape] in message, message
    assert_one_clean_line(message)


@pytest.mark.parametrize("path", ["thread", "loop"])
@pytest.mark.parametrize("shape", hostile.SHAPES)
@pytest.mark.parametrize("kind", sorted(IMAGE_SPECS))
def test_image_backends_hold_each_hostile_shape_to_its_bound(kind: str, shape: str, path: str) -> None:
    with LocalServer(hostile.handler(shape)) as server:
        backend = load_image_backend(IMAGE_SPECS[kind].format(url=server.url), OPTIONS)
        request = ImageRequest("a cat", width=64, height=64, seed=1)
        assert_held_to_bound(path, shape, backend, lambda: backend.generate(request))


OVERSIZED_BOUND_MB = 16
"""What refusing a 4096² reply to a 64² request may add to the client's peak: its few KB on the wire, not
the 48 MB its pixels take once decoded."""


@needs_proc
@pytest.mark.parametrize("kind", sorted(IMAGE_SPECS))
def test_a_reply_far_larger_than_asked_is_refused_before_its_pixels_are_decoded(kind: str) -> None:
    hostile.bomb_png(hostile.OVERSIZED_SIDE)  # made (a few KB) before the peak is reset
    with LocalServer(hostile.handler("oversized")) as server:
        backend: Any = load_image_backend(IMAGE_SPECS[kind].format(url=server.url), OPTIONS)
        request = ImageRequest("a cat", width=64, height=64, seed=1)
        start = reset_peak()
        message, _ = refused("thread", lambda: backend.generate(request))
        grown = peak_growth_mb(start)
        backend.close()
    print(f"{kind}: peak grew {grown:.1f} MB refusing a 4096x4096 reply")
    assert "4096x4096, far larger than the" in message and "asked for" in message, message
    assert "the server did not honour the size" in message
    assert grown < OVERSIZED_BOUND_MB


@pytest.mark.parametrize("path", ["thread", "loop"])
@pytest.mark.parametrize("shape", ["drip", "huge", "inflating"])
def test_a_judge_or_vlm_backend_holds_each_hostile_shape_to_its_bound(shape: str, path: str) -> None:
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "score this"}]}]
    with LocalServer(hostile.handler(shape)) as server:
        backend = load_vlm_backend(f"openai:{server.url}/v1#hostile", OPTIONS)
        assert_held_to_bound(path, shape, backend, lambda: backend.chat(messages, max_new_tokens=16))


@pytest.mark.parametrize("path", ["thread", "loop"])
def test_a_chat_reply_with_a_lone_surrogate_comes_back_as_text(path: str) -> None:
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "score this"}]}]
    with LocalServer(hostile.handler("surrogate")) as server:
        backend = load_vlm_backend(f"openai:{server.url}/v1#hostile", OPTIONS)
        assert isinstance(backend, OpenAIVLMBackend)  # a served backend: it has a client to close
        try:
            text = on_path(path, lambda: backend.chat(messages, max_new_tokens=16))
        finally:
            backend.close()
    assert text.startswith("cut off")


PROBE = """
import json, re, sys
from pathlib import Path
from interleave_thinker.cli.main import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    peak = re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text())
    print(json.dumps({"rss_mb": round(int(peak.group(1)) / 1024)}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc")
def test_an_8_request_batch_against_12000_pixel_replies_stays_under_1_gb(tmp_path: Path) -> None:
    hostile.bomb_png()  # made before the batch starts (the server thread serves it from the cache)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"draw {i}"}) + "\n" for i in range(8)))
    chat = scripted_models.handler("chat", scripted_models.State())
    with LocalServer(chat) as planner, LocalServer(hostile.handler("bomb")) as generator:
        vlm = f"openai:{planner.url}/v1#scripted"
        args = ["batch", "--input", str(inputs), "--out", str(tmp_path / "out"), "--preset", "tiny"]
        args += ["--planner", vlm, "--critic", vlm, "--generator", f"vllm-omni:{generator.url}#hostile"]
        args += ["--concurrency", "8", "--quiet"]
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "INTERLEAVE_THINKER_REMOTE__MAX_RETRIES": "0"},
        )
    assert done.stdout.strip(), done.stderr[-2000:]
    rss_mb = json.loads(done.stdout.strip().splitlines()[-1])["rss_mb"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    trace = json.loads((tmp_path / "out" / "requests" / "r0" / "trace.json").read_text())
    print(f"peak RSS of the batch: {rss_mb} MB")
    assert rss_mb < 1024
    assert summary["requests"]["failed"] == 8
    assert "12000x12000" in json.dumps(trace)
