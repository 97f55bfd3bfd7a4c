"""The demo served for real on 127.0.0.1: its API through gradio_client, the queue's limit, the CLI command."""

from __future__ import annotations

import gc
import json
import os
import runpy
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client, handle_file
from gradio_client.exceptions import ValidationError
from gradio_client.utils import Status

from interleave_thinker.ui import DemoOptions, build_demo
from tests.helpers.common import REPO
from tests.helpers.demo import BOMB_MESSAGE, GatedImage, bomb_png, free_port, scripted_pipeline, serve

# Gradio's server and client leave sockets and an event loop to the garbage collector when closed.
pytestmark = pytest.mark.filterwarnings(
    "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning"
)


def call(client: Client, text: str, size: str = "96x80") -> tuple[Any, ...]:
    return tuple(client.predict(text, [], 3, 0, "text", False, size, api_name="/run"))


def test_gradio_client_runs_and_the_app_keeps_serving_after_bad_input(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    options = DemoOptions(out_root=tmp_path / "demo")
    with serve(build_demo(scripted_pipeline(), options=options), options) as url:
        client = Client(url, verbose=False)
        request.addfinalizer(client.close)
        status, plan, *_ = call(client, "   ")
        assert "error: The request text is empty; say what to generate." in status and plan == ""
        status, plan, live, gallery, final, download = call(client, "Please paint an Owl")
        assert "phase-done" in status and "Owl sketch" in plan and "refined: try again" in live
        assert final.count('data-role="picture"') == 2
        # the result gallery reaches API clients too: each accepted image, named as in the zip
        assert [Path(item["image"]).name for item in gallery] == [
            "step01_attempt1.png",
            "step02_attempt1.png",
        ]
        assert [item["caption"] for item in gallery] == [
            "1. Owl sketch: Draw the Owl. (step01_attempt1.png)",
            "2. Owl colour: The Owl in colour. (step02_attempt1.png)",
        ]
        trace = json.loads(zipfile.ZipFile(download).read("trace.json"))
        assert trace["status"] == "succeeded" and trace["request"]["text"] == "Please paint an Owl"


def test_queue_runs_one_request_at_a_time(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    generator = GatedImage()
    options = DemoOptions(out_root=tmp_path / "demo", concurrency=1)
    with serve(build_demo(scripted_pipeline(generator, max_attempts=1), options=options), options) as url:
        first, second = Client(url, verbose=False), Client(url, verbose=False)
        request.addfinalizer(first.close)
        request.addfinalizer(second.close)
        jobs = [first.submit("Paint a Cat", [], 1, 0, "text", False, "96x80", api_name="/run")]
        assert generator.entered.acquire(timeout=60)  # the first run holds the only slot
        jobs.append(second.submit("Paint a Dog", [], 1, 0, "text", False, "96x80", api_name="/run"))
        deadline = time.monotonic() + 60
        while jobs[1].status().code != Status.IN_QUEUE and time.monotonic() < deadline:
            time.sleep(0.05)  # until the server has the second request waiting
        assert jobs[1].status().code == Status.IN_QUEUE
        for call_number in range(4):  # one generator call at a time: two steps for each run
            generator.release.release()
            if call_number < 3:
                assert generator.entered.acquire(timeout=60)
        results = [job.result(timeout=120) for job in jobs]
    assert [c.prompt for c in generator.calls] == ["a Cat", "colour it", "a Dog", "colour it"]
    assert generator.max_in_flight == 1
    assert "Cat sketch" in results[0][1] and "Dog sketch" in results[1][1]


def test_refusals_come_before_the_queue_while_another_visitor_is_served(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 30 item 9's acceptance: with the only slot held by one visitor's run, a 121-megapixel
    upload and a 1 MB request from another are each refused in under 2 s with the one-line message
    (Gradio's validator runs them before the queue), and the first visitor's run then finishes."""
    generator = GatedImage()
    options = DemoOptions(out_root=tmp_path / "demo", concurrency=1)
    bomb = bomb_png(tmp_path / "bomb.png", 11000)
    with serve(build_demo(scripted_pipeline(generator, max_attempts=1), options=options), options) as url:
        served, hostile = Client(url, verbose=False), Client(url, verbose=False)
        request.addfinalizer(served.close)
        request.addfinalizer(hostile.close)
        job = served.submit("Paint a Cat", [], 1, 0, "text", False, "96x80", api_name="/run")
        assert generator.entered.acquire(timeout=60)  # the served visitor's run holds the only slot
        refusals = {
            "files": (
                ("<image> next", [handle_file(str(bomb))]),
                BOMB_MESSAGE.format(
                    name="bomb.png", what="is 11000x11000 = 121000000 pixels, over the limit of 16777216"
                ),
            ),
            "text": (
                ("x" * 2**20, []),
                ("The request is 1,048,576 characters long; this demo takes at most 4,000. Shorten it."),
            ),
        }
        for field, (inputs, message) in refusals.items():
            started = time.monotonic()
            with pytest.raises(ValidationError) as caught:
                hostile.predict(*inputs, 1, 0, "text", False, "96x80", api_name="/run")
            assert time.monotonic() - started < 2
            assert str(caught.value).splitlines()[1:] == [f"- {field}: {message}"]
        assert not job.done() and generator.in_flight == 1  # still waiting for the test's gate
        generator.release.release()
        assert generator.entered.acquire(timeout=60)
        generator.release.release()
        status, plan, *_ = job.result(timeout=120)
        assert "phase-done" in status and "Cat sketch" in plan
        for _ in range(2):  # the refused visitor's next, valid request runs as usual
            generator.release.release()
        status, plan, *_ = hostile.predict("Paint a Dog", [], 1, 0, "text", False, "96x80", api_name="/run")
    assert "phase-done" in status and "Dog sketch" in plan
    assert [c.prompt for c in generator.calls] == ["a Cat", "colour it", "a Dog", "colour it"]


def test_demo_command_refuses_bad_options(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "interleave_thinker", "demo", "--config", "missing.yaml", "--port", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert "missing.yaml" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--concurrency", "--port"])
def test_demo_command_bounds(tmp_path: Path, flag: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "interleave_thinker", "demo", flag, "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 2 and flag in result.stderr


@pytest.mark.slow
def test_demo_command_serves_the_tiny_preset(tmp_path: Path) -> None:
    """The real command on the tiny preset: it serves the page and answers the API."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "interleave_thinker",
            "demo",
            "--preset",
            "tiny",
            "--port",
            str(port),
            "--out-root",
            str(tmp_path / "runs"),
            "--max-prompt-chars",
            "40",
        ],
        cwd=tmp_path,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and process.poll() is None:
            try:
                page = httpx.get(url, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert page.status_code == 200 and "interleave-thinker" in page.text
        client = Client(url, verbose=False)
        status, *_ = client.predict("", [], 1, 0, "text", False, "64x64", api_name="/run")
        with pytest.raises(ValidationError, match="this demo takes at most 40"):  # the flag reaches the app
            client.predict("x" * 41, [], 1, 0, "text", False, "64x64", api_name="/run")
        client.close()
        assert "error: The request text is empty; say what to generate." in status
    finally:
        process.terminate()
        process.wait(timeout=60)
        if process.stderr is not None:
            process.stderr.close()
        gc.collect()  # the client's leftovers, under this module's warning filter


@pytest.mark.slow
def test_space_app_builds_the_tiny_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gradio as gr

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    namespace = runpy.run_path(str(REPO / "examples" / "space" / "app.py"))
    assert isinstance(namespace["demo"], gr.Blocks)
    assert namespace["options"].concurrency == 1
    namespace.clear()
    gc.collect()
