"""The generator service: request parsing in-process, and real ``serve generator`` subprocesses on
127.0.0.1 over the tiny FLUX.2-klein for everything with sockets, processes and signals."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.server.generator import (
    GeneratorProcess,
    RequestError,
    ServiceSettings,
    free_port,
    parse_edit_request,
    worker_devices,
)
from interleave_thinker.server.generator.openai_protocol import parse_edit_form, parse_generation
from interleave_thinker.server.generator.protocol import EditJob
from interleave_thinker.server.generator.worker import job_request
from interleave_thinker.testing.doubles import hostile
from tests.helpers import input_errors
from tests.helpers.memory import needs_proc, peak_growth_mb, reset_peak
from tests.helpers.served import SMALL, TOKEN, TOKEN_ENV, service_env

SLOW = {"width": 1024, "height": 1024, "num_inference_step": 8}  # ~3 s on 2 CPU cores


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png_claiming(width: int, height: int) -> bytes:
    """A 1x1 PNG whose IHDR (with a correct CRC) claims ``width`` x ``height``: a decompression bomb header."""
    data = bytearray(png_bytes(Image.new("RGB", (1, 1))))
    assert data[12:16] == b"IHDR"
    data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    return bytes(data)


def decode_reply(reply: httpx.Response) -> Image.Image:
    assert reply.status_code == 200, reply.text[:300]
    body = reply.json()
    assert body["success"] is True
    with Image.open(io.BytesIO(base64.b64decode(body["edited_image"], validate=True))) as image:
        return image.convert("RGB")


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()))
    thread.start()
    return thread, result


def start_service(*args: str, workers: int = 1) -> GeneratorProcess:
    service = GeneratorProcess("tiny:generator", workers=workers, device="cpu", args=args, env=service_env())
    return service.__enter__()


@pytest.fixture(scope="module")
def local_generator() -> Any:
    from interleave_thinker.backends.specs import BackendOptions, load_image_backend

    return load_image_backend("tiny:generator", BackendOptions(device="cpu"))


# --- in-process: request parsing and settings ----------------------------------------------------
def test_knobs_map_to_generate_arguments() -> None:
    body = b'{"prompt": "p", "seed": 5, "num_inference_step": 3, "guidance_scale": 2.5, "width": 96, "height": 48, "enhance_prompt": false, "negative_prompt": ""}'
    job = parse_edit_request(body, max_pixels=10**6)
    assert (job.prompt, job.image_png, job.seed, job.steps, job.guidance) == ("p", None, 5, 3, 2.5)
    assert (job.width, job.height) == (96, 48)
    plural = parse_edit_request(
        b'{"prompt": "p", "num_inference_steps": 7, "text_guidance_scale": 4}', max_pixels=10**7
    )
    assert (plural.steps, plural.guidance, plural.seed, plural.width, plural.height) == (
        7,
        4.0,
        0,
        1024,
        1024,
    )
    image = png_bytes(Image.new("RGB", (40, 30), "red"))
    edit = parse_edit_request(f'{{"prompt": "p", "image": "{b64(image)}"}}'.encode(), max_pixels=10**6)
    assert (edit.image_png, edit.width, edit.height, edit.steps, edit.guidance) == (image, 40, 30, None, None)


def test_openai_fields_map_to_the_same_job_as_edit() -> None:
    """One mapping: ``/v1/images/*`` fields (JSON, or multipart strings) give ``/edit``'s job."""
    image = png_bytes(Image.new("RGB", (40, 30), "red"))
    limits: dict[str, Any] = {"served": "tiny:generator", "max_pixels": 10**6}
    edit = parse_edit_request(
        f'{{"prompt": "p", "image": "{b64(image)}", "width": 64, "height": 48, "seed": 9, '
        f'"num_inference_steps": 3, "guidance_scale": 2.5}}'.encode(),
        max_pixels=10**6,
    )
    form = {"prompt": "p", "size": "64x48", "seed": "9", "num_inference_steps": "3", "true_cfg_scale": "2.5"}
    assert parse_edit_form({**form, "n": "1", "response_format": "b64_json"}, image, **limits) == edit
    text = parse_generation(
        b'{"prompt": "p", "size": "64x48", "seed": 9, "num_inference_steps": 3, "guidance_scale": 2.5,'
        b' "model": "tiny:generator", "generator_device": "cpu", "output_format": "png"}',
        **limits,
    )
    assert text == parse_edit_request(
        b'{"prompt": "p", "width": 64, "height": 48, "seed": 9, "num_inference_steps": 3, "guidance_scale": 2.5}',
        max_pixels=10**6,
    )
    for fields, message in [
        ({**form, "size": "64by48"}, "Invalid size"),
        ({**form, "seed": "seven"}, "'seed' must be a number"),
        ({**form, "response_format": "url"}, "'response_format' 'url' is not supported"),
        ({**form, "model": "other"}, "Model mismatch: request specifies 'other'"),
        ({**form, "size": "5000x5000"}, "not allowed"),
    ]:
        with pytest.raises(RequestError, match=message):
            parse_edit_form(fields, image, **limits)
    with pytest.raises(RequestError, match="Missing 'image'"):
        parse_edit_form(form, None, **limits)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"prompt": ', "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"image": null}', "Missing 'prompt'"),
        (b'{"prompt": "p", "image": "@@not base64@@"}', "not valid base64"),
        (b'{"prompt": "p", "seed": "seven"}', "'seed' must be a number"),
        (b'{"prompt": "p", "num_inference_step": 0}', "1..1000"),
        (b'{"prompt": "p", "width": 0}', "not allowed"),
        (b'{"prompt": "p", "width": 5000, "height": 5000}', "not allowed"),
        (b'{"prompt": "p", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (
            b'{"prompt": "' + b"p" * 16_385 + b'"}',
            "over the limit of 16384 (the service's --max-prompt-chars)",
        ),
    ],
)
def test_bad_requests_are_refused_with_400(body: bytes, message: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_edit_request(body, max_pixels=4096 * 4096)
    assert info.value.status == 400
    assert message in info.value.message


REFERENCES_BOUND_MB = 32
"""What refusing 15 references of 2048² to a model taking 3 may add to the worker's peak: not the 190 MB
of their decoded pixels."""


@pytest.mark.slow  # loads the tiny generator (module fixture)
@needs_proc
def test_references_over_the_models_cap_are_refused_before_any_is_decoded(local_generator: Any) -> None:
    png = hostile.bomb_png(2048)  # a valid 2048x2048 PNG of a few KB, never decoded here
    job = EditJob("a cat", png, 64, 64, 0, 1, None, (png,) * 15).to_message()
    start = reset_peak()
    with pytest.raises(RequestError) as info:
        job_request(local_generator, job, 4096 * 4096)
    grown = peak_growth_mb(start)
    print(f"peak grew {grown:.1f} MB refusing 15 references")
    assert info.value.status == 400
    assert "takes at most 3 reference images, got 15" in info.value.message
    assert grown < REFERENCES_BOUND_MB


def test_settings_are_checked_before_any_process_starts() -> None:
    assert worker_devices("cpu", 3) == ("cpu", "cpu", "cpu")
    assert worker_devices("cpu", None) == ("cpu",)
    with pytest.raises(ConfigError, match="--device must be auto, cpu or cuda"):
        worker_devices("tpu", 1)
    with pytest.raises(ConfigError, match="Unknown backend kind 'nope'"):
        ServiceSettings(generator="nope:x")
    with pytest.raises(ConfigError, match="cannot serve an http"):
        ServiceSettings(generator="http:http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="--timeout"):
        ServiceSettings(generator="tiny:generator", timeout=0)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "interleave_thinker", "serve", "generator", "--device", "cpu", *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, **service_env()}
    )


@pytest.mark.slow
def test_a_worker_that_cannot_load_stops_the_service_at_startup() -> None:
    done = run_cli("--generator", "tiny:planner", "--port", str(free_port()))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "Generator worker 0 on cpu could not load 'tiny:planner'" in done.stderr
    assert "target must be 'generator' or empty" in done.stderr


@pytest.mark.slow
def test_sigterm_while_loading_stops_the_workers_and_exits_0() -> None:
    service = GeneratorProcess("tiny:generator", device="cpu", env=service_env()).start()
    try:
        wait_until(lambda: "loading tiny:generator on cpu (pid " in service.log_text(), timeout=60)
        pid = int(service.log_text().split("(pid ")[1].split(")")[0])
        assert service.stop(signal.SIGTERM, timeout=30) == 0
    finally:
        service.kill()
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=10)


def test_busy_port_fails_fast_with_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = run_cli("--generator", "tiny:generator", "--port", port)
    assert done.returncode == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "choose another --port" in done.stderr


# --- the main service: 2 workers, bearer token ---------------------------------------------------
@pytest.fixture(scope="module")
def service() -> Iterator[GeneratorProcess]:
    running = start_service("--api-key-env", TOKEN_ENV, workers=2)
    try:
        yield running
    finally:
        assert running.stop() == 0


@pytest.fixture(scope="module")
def client(service: GeneratorProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=service.url, headers=headers, timeout=120.0) as session:
        yield session


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "shape", "request_kwargs", "status", "says"), input_errors.rows("generator")
)
def test_what_the_model_refuses_is_a_4xx_with_an_error_body(
    client: httpx.Client, route: str, shape: str, request_kwargs: dict[str, Any], status: int, says: str
) -> None:
    """The generator's rows of the input-error table both servers answer (tests/helpers/input_errors.py)."""
    input_errors.assert_refused(client.post(route, **request_kwargs), shape, status, says)


@pytest.mark.slow
def test_health_is_open_and_edit_needs_the_token(service: GeneratorProcess, client: httpx.Client) -> None:
    with httpx.Client(base_url=service.url, timeout=30.0) as anonymous:
        health = anonymous.get("/health")
        assert (health.status_code, health.json()) == (
            200,
            {"status": "ok", "generator": "tiny:generator", "workers": 2, "workers_ready": 2},
        )
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = anonymous.post("/edit", json={"prompt": "p", **SMALL}, headers=headers)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["success"] is False
            assert "bearer token" in refused.json()["error"]
        assert anonymous.get("/metrics").status_code == 401
    assert (
        client.get("/metrics.json").json()["unauthorized"] == 3
    )  # /edit refusals; /metrics ones are not requests


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"prompt": "a cat", "seed": ', "not valid JSON"),
        ('{"prompt": "a cat", "image": "%%%%"}', "not valid base64"),
        ('{"image": null, "seed": 1}', "Missing 'prompt'"),
        (f'{{"prompt": "p", "image": "{b64(png_claiming(20000, 20000))}"}}', "decompression bomb"),
        (f'{{"prompt": "p", "image": "{b64(png_claiming(5000, 5000))}"}}', "over the limit of 16777216"),
        (
            f'{{"prompt": "p", "image": "{b64(png_bytes(Image.new("RGB", (64, 64)))[:60])}"}}',
            "could not be decoded",
        ),
        ('{"prompt": "p", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"prompt": "' + "p" * 20_000 + '"}', "--max-prompt-chars"),
    ],
    ids=[
        "bad-json",
        "bad-base64",
        "no-prompt",
        "pixel-bomb",
        "over-max-pixels",
        "truncated-png",
        "deep-json",
        "long-prompt",
    ],
)
def test_bad_requests_get_400_with_a_message(client: httpx.Client, body: str, message: str) -> None:
    before = client.get("/metrics.json").json()["bad_request"]
    reply = client.post("/edit", content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == 400
    assert reply.json()["success"] is False
    assert message in reply.json()["error"]
    assert client.get("/metrics.json").json()["bad_request"] == before + 1


@pytest.mark.slow
def test_body_over_the_limit_gets_413(client: httpx.Client) -> None:
    body = b'{"prompt": "p", "pad": "' + b"x" * (20 * 1024 * 1024) + b'"}'
    reply = client.post("/edit", content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == 413
    assert "over the limit of 20971520 bytes" in reply.json()["error"]


@pytest.mark.slow
def test_openai_routes_share_the_token_limits_and_metrics(
    service: GeneratorProcess, client: httpx.Client
) -> None:
    """``/v1/images/*`` beside ``/edit``: errors in vLLM's shape, counted with the other requests."""
    before = client.get("/metrics.json").json()
    with httpx.Client(base_url=service.url, timeout=30.0) as anonymous:
        assert anonymous.get("/v1/models").status_code == 401
        refused = anonymous.post("/v1/images/generations", json={"prompt": "p", "size": "64x64"})
        assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
        assert refused.json()["error"]["type"] == "authentication_error"
        assert "bearer token" in refused.json()["error"]["message"]
        edit = anonymous.post("/v1/images/edits", data={"prompt": "p"}, files={"image": ("a.png", b"x")})
        assert edit.status_code == 401
    bad = client.post("/v1/images/generations", json={"prompt": "p", "size": "64by64"})
    assert bad.status_code == 400
    assert bad.json() == {
        "error": {
            "message": "Invalid size '64by64': 'size' must be 'WIDTHxHEIGHT', e.g. '1024x1024'.",
            "type": "invalid_request_error",
            "param": None,
            "code": 400,
        }
    }
    no_image = client.post("/v1/images/edits", data={"prompt": "p"}, files={"other": ("a.png", b"x")})
    assert (no_image.status_code, no_image.json()["error"]["code"]) == (400, 400)
    assert "Missing 'image'" in no_image.json()["error"]["message"]
    assert client.post("/v1/images/edits", json={"prompt": "p"}).status_code == 400  # not multipart
    models = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["tiny:generator"] and models[0]["root"].startswith("diffusers:")
    made = client.post(
        "/v1/images/generations",
        json={"prompt": "a cat", "size": "64x48", "seed": 3, "num_inference_steps": 2},
    )
    assert made.status_code == 200 and isinstance(made.json()["created"], int)
    with Image.open(io.BytesIO(base64.b64decode(made.json()["data"][0]["b64_json"], validate=True))) as image:
        assert image.size == (64, 48)
    after = client.get("/metrics.json").json()
    deltas = {k: after[k] - before[k] for k in ("unauthorized", "bad_request", "completed", "failed")}
    assert deltas == {"unauthorized": 2, "bad_request": 3, "completed": 1, "failed": 0}


@pytest.mark.slow
def test_edit_with_an_input_image_matches_the_local_backend(
    client: httpx.Client, local_generator: Any
) -> None:
    source = Image.new("RGB", (96, 64), (200, 30, 90))
    request = {"prompt": "make it blue", "image": b64(png_bytes(source)), "seed": 11, "num_inference_step": 2}
    got = decode_reply(client.post("/edit", json=request))
    expected = local_generator.generate(
        ImageRequest("make it blue", image=source, width=96, height=64, seed=11, steps=2)
    )
    assert got.size == (96, 64)
    assert got.tobytes() == expected.tobytes()


@pytest.mark.slow
def test_200_requests_at_concurrency_32_lose_and_duplicate_nothing(
    client: httpx.Client, local_generator: Any
) -> None:
    combos = [(prompt, seed) for prompt in ("a red fox", "a blue boat") for seed in range(10)]
    expected = {
        (p, s): local_generator.generate(ImageRequest(p, width=64, height=64, seed=s, steps=2)).tobytes()
        for p, s in combos
    }
    before = client.get("/metrics.json").json()

    def one(i: int) -> tuple[int, Image.Image, dict[str, float]]:
        prompt, seed = combos[i % len(combos)]
        reply = client.post("/edit", json={"prompt": prompt, "seed": seed, "request": i, **SMALL})
        return i, decode_reply(reply), reply.json()["timings"]

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(one, range(200)))

    assert sorted(i for i, _, _ in results) == list(range(200))
    for i, image, timings in results:
        assert image.size == (64, 64)
        assert image.tobytes() == expected[combos[i % len(combos)]], (
            f"request {i} got another request's image"
        )
        assert 0 < timings["pipeline_s"] <= timings["total_s"]
    after = client.get("/metrics.json").json()
    assert after["completed"] - before["completed"] == 200
    assert [after[k] - before[k] for k in ("failed", "timed_out", "rejected")] == [0, 0, 0]
    assert (after["queue_depth"], after["in_flight"]) == (0, 0)
    assert 0 < after["latency_s"]["p50"] <= after["latency_s"]["p90"] <= after["latency_s"]["p99"]
    assert 0 < after["pipeline_s"]["p50"] <= after["latency_s"]["p99"]
    assert sum(w["completed"] for w in after["workers"]) == after["completed"]
    assert all(w["completed"] > 20 and w["state"] == "idle" for w in after["workers"])


# --- limits: one worker, a queue of one, one second per request ----------------------------------
@pytest.fixture
def limited() -> Iterator[GeneratorProcess]:
    running = start_service("--queue-size", "1", "--timeout", "1")
    try:
        yield running
    finally:
        assert running.stop() == 0


@pytest.mark.slow
def test_full_queue_gets_503_and_late_replies_504(limited: GeneratorProcess) -> None:
    with httpx.Client(base_url=limited.url, timeout=60.0) as client:

        def metric(name: str) -> Any:
            return client.get("/metrics.json").json()[name]

        def slow_request() -> httpx.Response:
            return client.post("/edit", json={"prompt": "slow", **SLOW})

        first, first_reply = in_background(slow_request)
        wait_until(lambda: metric("in_flight") == 1)
        second, second_reply = in_background(slow_request)
        wait_until(lambda: metric("queue_depth") == 1)
        rejected = slow_request()
        assert rejected.status_code == 503
        assert int(rejected.headers["retry-after"]) >= 1
        assert "--queue-size 1" in rejected.json()["error"]
        for thread in (first, second):
            thread.join()
        for reply in (first_reply[0], second_reply[0]):
            assert reply.status_code == 504
            assert reply.json() == {
                "success": False,
                "error": "Generation timed out: no reply within the service's --timeout of 1s.",
            }
        wait_until(lambda: metric("in_flight") == 0 and metric("queue_depth") == 0)
        metrics = client.get("/metrics.json").json()
        assert {k: metrics[k] for k in ("completed", "timed_out", "rejected", "failed")} == {
            "completed": 0,
            "timed_out": 2,
            "rejected": 1,
            "failed": 0,
        }
        assert metrics["latency_s"]["count"] == 0  # only answered requests have a latency
        # the first job ran to its end (its reply was dropped); the queued one never reached the worker
        assert metrics["workers"][0]["completed"] == 1


@pytest.mark.slow
def test_a_client_that_disconnects_frees_its_place_in_the_queue() -> None:
    service = start_service("--queue-size", "1")
    try:
        with httpx.Client(base_url=service.url, timeout=120.0) as client:

            def metric(name: str) -> Any:
                return client.get("/metrics.json").json()[name]

            first, first_reply = in_background(lambda: client.post("/edit", json={"prompt": "a", **SLOW}))
            wait_until(lambda: metric("in_flight") == 1)
            body = json.dumps({"prompt": "gone", **SLOW}).encode()
            with socket.create_connection(("127.0.0.1", service.port)) as raw:
                raw.sendall(
                    b"POST /edit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                wait_until(lambda: metric("queue_depth") == 1)
            wait_until(lambda: metric("disconnected") == 1)
            assert metric("queue_depth") == 0  # its place is free before the worker is
            third = client.post("/edit", json={"prompt": "c", **SMALL})
            assert decode_reply(third).size == (64, 64)  # without the fix: 503, the queue looked full
            first.join(60)
            assert decode_reply(first_reply[0]).size == (1024, 1024)
            assert metric("workers")[0]["completed"] == 2  # the abandoned job never ran
    finally:
        assert service.stop() == 0


# --- the main service again: a worker crash, then a graceful shutdown (keep these last) ------------
@pytest.mark.slow
def test_a_dead_idle_worker_fails_health_and_requests_go_to_a_live_one(client: httpx.Client) -> None:
    wait_until(lambda: client.get("/health").status_code == 200, timeout=120)
    victim = client.get("/metrics.json").json()["workers"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(lambda: client.get("/health").status_code == 503)
    health = client.get("/health").json()
    assert (health["status"], health["workers_ready"]) == ("degraded", 1)
    results = [client.post("/edit", json={"prompt": "next", "seed": s, **SMALL}) for s in range(4)]
    assert [decode_reply(r).size for r in results] == [(64, 64)] * 4  # none got the dead worker's 500
    wait_until(lambda: client.get("/health").status_code == 200, timeout=120)
    worker = client.get("/metrics.json").json()["workers"][0]
    assert worker["pid"] != victim["pid"] and worker["restarts"] >= 1


@pytest.mark.slow
def test_worker_crash_fails_its_request_and_the_worker_restarts(client: httpx.Client) -> None:
    before = client.get("/metrics.json").json()
    thread, reply = in_background(lambda: client.post("/edit", json={"prompt": "doomed", **SLOW}))
    started_before = sum(w["started"] for w in before["workers"])
    # until a worker has acknowledged the job: killed before that, the job is retried (not this test)
    wait_until(
        lambda: sum(w["started"] for w in client.get("/metrics.json").json()["workers"]) > started_before
    )
    busy = next(w for w in client.get("/metrics.json").json()["workers"] if w["state"] == "busy")
    os.kill(busy["pid"], signal.SIGKILL)
    thread.join(30)
    assert reply[0].status_code == 500
    assert reply[0].json()["success"] is False
    crash = f"worker {busy['index']} (pid {busy['pid']}, cpu) died while generating (exit code -9)"
    assert crash in reply[0].json()["error"]
    wait_until(lambda: client.get("/health").json()["workers_ready"] == 2, timeout=120)
    results = [client.post("/edit", json={"prompt": "after", "seed": s, **SMALL}) for s in range(4)]
    assert [decode_reply(r).size for r in results] == [(64, 64)] * 4
    after = client.get("/metrics.json").json()
    worker = after["workers"][busy["index"]]
    restarts_before = before["workers"][busy["index"]]["restarts"]
    assert (worker["restarts"], worker["state"]) == (restarts_before + 1, "idle")
    assert worker["pid"] != busy["pid"]
    assert (after["failed"] - before["failed"], after["completed"] - before["completed"]) == (1, 4)


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight_and_exits_0(
    service: GeneratorProcess, client: httpx.Client
) -> None:
    assert service.process is not None
    worker_pids = [w["pid"] for w in client.get("/metrics.json").json()["workers"]]
    thread, reply = in_background(lambda: client.post("/edit", json={"prompt": "last", **SLOW}))
    wait_until(lambda: client.get("/metrics.json").json()["in_flight"] == 1)
    service.process.send_signal(signal.SIGTERM)
    assert service.process.wait(60) == 0
    thread.join(30)
    assert decode_reply(reply[0]).size == (1024, 1024)
    for pid in worker_pids:

        def exited(pid: int = pid) -> bool:
            return not Path(f"/proc/{pid}").exists()

        wait_until(exited, timeout=10)
    with pytest.raises(httpx.ConnectError), httpx.Client() as late:
        late.get(f"{service.url}/health")
