"""The ``http:`` image backend: scripted "/edit" servers (``testing.doubles.generator``) for the protocol and
retry behaviour, and two real ``serve generator`` subprocesses for a pool that loses a node."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from interleave_thinker.backends.image.http_backend import KNOB_PRESETS, HTTPImageBackend, parse_target
from interleave_thinker.backends.protocols import ImageBackend, ImageRequest
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.specs import BackendOptions, load_image_backend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.server.generator import GeneratorProcess
from interleave_thinker.testing.doubles.generator import RED, ScriptedEditServer
from tests.helpers.common import tiny_dir

FAST = RetrySettings(max_retries=3, backoff_base=0.01, backoff_max=0.05, timeout=5.0)


@pytest.fixture
def scripted() -> Iterator[ScriptedEditServer]:
    server = ScriptedEditServer()
    yield server
    server.close()


def backend_for(*urls: str, retry: RetrySettings = FAST, **kwargs: Any) -> HTTPImageBackend:
    return HTTPImageBackend(list(urls), retry=retry, **kwargs)


# --- protocol ------------------------------------------------------------------------------------
def test_klein_knobs_are_sent_exactly(scripted: ScriptedEditServer) -> None:
    with backend_for(scripted.url) as backend:
        assert isinstance(backend, ImageBackend)
        image = backend.generate(ImageRequest("a cat", seed=7))
        assert image.tobytes() == RED.tobytes()
        source = Image.new("RGB", (16, 8), (0, 0, 255))
        backend.generate(
            ImageRequest("blue", image=source, width=512, height=256, seed=3, steps=2, guidance=3.5)
        )
    assert scripted.received[0].body == {
        "image": None,
        "prompt": "a cat",
        "seed": 7,
        "num_inference_step": 4,
        "guidance_scale": 1.0,
        "width": 1024,
        "height": 1024,
        "enhance_prompt": False,
    }
    second = scripted.received[1].body
    sent = Image.open(io.BytesIO(base64.b64decode(second.pop("image"))))
    assert (sent.size, sent.convert("RGB").tobytes()) == ((16, 8), source.tobytes())
    assert second == {
        "prompt": "blue",
        "seed": 3,
        "num_inference_step": 2,
        "guidance_scale": 3.5,
        "width": 512,
        "height": 256,
        "enhance_prompt": False,
    }
    assert "authorization" not in {k.lower() for k in scripted.received[0].headers}


def test_presets_from_the_spec_and_the_bearer_token_from_env(
    scripted: ScriptedEditServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_GENERATOR_TOKEN", "t0k3n")
    options = BackendOptions(remote=RemoteOptions(api_key_env="MY_GENERATOR_TOKEN", backoff_base=0.01))
    backend = load_image_backend(f"http:{scripted.url}#omnigen2", options)
    assert isinstance(backend, HTTPImageBackend)
    assert backend.name == f"http:{scripted.url}#omnigen2"
    with backend:
        backend.generate(ImageRequest("p", seed=1, guidance=6.0, width=640, height=480))
    assert scripted.received[0].body == {
        "image": None,
        "prompt": "p",
        "seed": 1,
        "num_inference_step": 50,
        "text_guidance_scale": 6.0,
        "image_guidance_scale": 1.5,
        "negative_prompt": "",
        "width": 640,
        "height": 480,
    }
    assert scripted.received[0].headers["Authorization"] == "Bearer t0k3n"
    monkeypatch.delenv("MY_GENERATOR_TOKEN")
    with pytest.raises(ConfigError, match="MY_GENERATOR_TOKEN"):
        load_image_backend(f"http:{scripted.url}", options)
    with pytest.raises(ConfigError, match="Unknown knob preset 'flux9'"):
        load_image_backend(f"http:{scripted.url}#flux9")
    assert set(KNOB_PRESETS) == {"klein", "omnigen2", "qwen-image-edit", "longcat"}


def test_endpoints_file_and_spec_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("hosts.txt").write_text(
        "# generator nodes\n\n10.0.0.1:8011\n  10.0.0.2:8011  # second rack\nhttps://gen.example.org/edit\n"
        "http://10.0.0.3:9000/\nlocalhost\n",
        encoding="utf-8",
    )
    urls = [
        "http://10.0.0.1:8011",
        "http://10.0.0.2:8011",
        "https://gen.example.org",
        "http://10.0.0.3:9000",
        "http://localhost",
    ]
    assert parse_target("@hosts.txt") == (urls, "klein", {})
    assert parse_target("@hosts.txt,127.0.0.1:1#knobs=longcat") == (
        [*urls, "http://127.0.0.1:1"],
        "longcat",
        {},
    )
    assert parse_target("http://a:1, http://b:2#qwen-image-edit") == (
        ["http://a:1", "http://b:2"],
        "qwen-image-edit",
        {},
    )
    backend = HTTPImageBackend.from_spec("@hosts.txt", BackendOptions())
    with backend:
        assert backend.pool.urls == urls
    Path("slots.txt").write_text("a:1 slots=2  # the big one\nb:2\n", encoding="utf-8")
    assert parse_target("@slots.txt") == (["http://a:1", "http://b:2"], "klein", {"http://a:1": 2})
    Path("empty.txt").write_text("# nothing yet\n\n", encoding="utf-8")
    for bad in ("a:1 slots=0", "a:1 slots=two", "a:1 weight=3"):
        Path("bad.txt").write_text(f"b:2\n{bad}\n", encoding="utf-8")
        with pytest.raises(
            ConfigError, match=r"bad\.txt, line 2: .*write 'host:port' or 'host:port slots=N'"
        ):
            parse_target("@bad.txt")
    for target, message in [
        ("@empty.txt", "lists no endpoint"),
        ("@missing.txt", "Cannot read the generator endpoints file missing.txt"),
        ("", "names no endpoint"),
        ("ftp://x:1", "is not an address"),
        ("host:notaport", "bad port"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_target(target)


# --- retries -------------------------------------------------------------------------------------
@pytest.mark.parametrize("failures", [1, 3])
def test_5xx_replies_are_retried_until_success(scripted: ScriptedEditServer, failures: int) -> None:
    scripted.script = [(500, {"success": False, "error": "CUDA out of memory"})] * failures
    with backend_for(scripted.url) as backend:
        image = backend.generate(ImageRequest("p"))
    assert image.tobytes() == RED.tobytes()
    assert len(scripted.received) == failures + 1


def test_a_server_that_hangs_times_out_then_fails(scripted: ScriptedEditServer) -> None:
    scripted.then = "hang"
    retry = RetrySettings(max_retries=2, backoff_base=0.01, timeout=0.3)
    start = time.monotonic()
    with backend_for(scripted.url, retry=retry) as backend, pytest.raises(BackendError) as info:
        backend.generate(ImageRequest("p"))
    assert time.monotonic() - start < 3.0
    assert len(scripted.received) == 3
    assert "3 tries failed" in str(info.value)
    assert "timed out after 0.3s" in str(info.value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>Bad Gateway</html>", "reply is not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"success": true}', "no 'edited_image'"),
        (b'{"success": true, "edited_image": "not*base64"}', "'edited_image' is not a base64 image"),
        (
            json.dumps({"success": True, "edited_image": base64.b64encode(b"GIF89a..").decode()}).encode(),
            "not a base64 image",
        ),
    ],
)
def test_garbage_replies_are_retried_then_fail(
    scripted: ScriptedEditServer, body: bytes, message: str
) -> None:
    scripted.then = (200, body)
    with backend_for(scripted.url) as backend, pytest.raises(BackendError, match=message):
        backend.generate(ImageRequest("p"))
    assert len(scripted.received) == 4


@pytest.mark.parametrize("status", [200, 500])
def test_success_false_is_retried_and_the_server_error_reported(
    scripted: ScriptedEditServer, status: int
) -> None:
    scripted.then = (status, {"success": False, "error": "boom"})
    with backend_for(scripted.url) as backend, pytest.raises(BackendError) as info:
        backend.generate(ImageRequest("p"))
    assert len(scripted.received) == 4
    assert "boom" in str(info.value)


def test_a_400_is_not_retried(scripted: ScriptedEditServer) -> None:
    scripted.then = (400, {"success": False, "error": "Missing 'prompt'"})
    with backend_for(scripted.url) as backend, pytest.raises(BackendError) as info:
        backend.generate(ImageRequest("p"))
    assert len(scripted.received) == 1
    assert f"HTTP 400 from {scripted.url}/edit: Missing 'prompt'" in str(info.value)


def test_503_retry_after_is_waited_for(scripted: ScriptedEditServer) -> None:
    scripted.script = [(503, {"success": False, "error": "busy"}, {"Retry-After": "0.3"})]
    with backend_for(scripted.url) as backend:
        backend.generate(ImageRequest("p"))
    assert len(scripted.received) == 2
    assert scripted.received[1].at - scripted.received[0].at >= 0.3


def test_calls_go_round_robin_and_skip_a_failing_endpoint() -> None:
    first, second = ScriptedEditServer(), ScriptedEditServer()
    try:
        with backend_for(first.url, second.url, concurrency=1) as backend:
            for _ in range(4):
                backend.generate(ImageRequest("p"))
            assert (len(first.received), len(second.received)) == (2, 2)
            first.then = (502, b"bad gateway")
            for _ in range(4):
                backend.generate(ImageRequest("p"))
        # first failed once, was put in cooldown, and every later call went to second
        assert (len(first.received), len(second.received)) == (3, 6)
    finally:
        first.close()
        second.close()


def test_generate_batch_keeps_order_across_the_pool(scripted: ScriptedEditServer) -> None:
    with backend_for(scripted.url, concurrency=4) as backend:
        images = backend.generate_batch([ImageRequest(f"p{i}", seed=i) for i in range(6)])
    assert len(images) == 6
    assert sorted(r.body["seed"] for r in scripted.received) == list(range(6))


# --- real services -------------------------------------------------------------------------------
@pytest.mark.slow
def test_pool_of_two_services_survives_losing_one() -> None:
    tiny = tiny_dir()
    env = {"INTERLEAVE_THINKER_TINY_DIR": tiny, "HF_HUB_OFFLINE": "1"}
    services = [GeneratorProcess("tiny:generator", device="cpu", env=env) for _ in range(2)]
    try:
        for service in services:  # load both at once
            service.start()
        for service in services:
            service.wait_ready()
        retry = RetrySettings(max_retries=3, backoff_base=0.01, timeout=60.0)
        with backend_for(*(s.url for s in services), retry=retry, concurrency=1) as backend:
            before = [
                backend.generate(ImageRequest("a fox", width=64, height=64, seed=5, steps=2))
                for _ in range(4)
            ]
            services[0].kill()
            after = [
                backend.generate(ImageRequest("a fox", width=64, height=64, seed=5, steps=2))
                for _ in range(4)
            ]
        images = before + after
        assert all(image.size == (64, 64) for image in images)
        assert len({image.tobytes() for image in images}) == 1  # both nodes give the same image
        metrics = httpx.get(f"{services[1].url}/metrics.json", timeout=10).json()
        assert (metrics["completed"], metrics["failed"]) == (2 + 4, 0)
    finally:
        for service in services:
            service.kill()
