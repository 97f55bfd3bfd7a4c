"""``GET /metrics`` in the Prometheus text format (issue 17, item 7): parsed with prometheus_client's own
parser after known requests, for ``serve vlm`` in process and ``serve generator`` as a real subprocess;
each app keeps its own registry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from interleave_thinker.server.generator.metrics import PoolCollector, ServiceMetrics
from interleave_thinker.server.vlm_service import VLMLimits, create_app
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.scripted import ScriptedVLMBackend

CHAT = "/v1/chat/completions"
TOKEN_ENV = "IT_TEST_METRICS_TOKEN"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text page, keyed by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(page: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return page.get((name, frozenset(labels.items())), 0.0)


class Words:
    """A whitespace tokenizer, enough for the server's usage figures."""

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": list(range(len(text.split())))}


class CountingBackend(ScriptedVLMBackend):
    tokenizer = Words()


def chat(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 16}


@pytest.fixture
def vlm() -> Iterator[tuple[AppServer, AppServer]]:
    """Two apps in one process: each must count only its own requests."""
    backend = CountingBackend(["three word reply"], repeat_last=True)
    limits = VLMLimits(max_body_bytes=4096)
    with AppServer(create_app(backend, "m", limits)) as one, AppServer(create_app(backend, "m")) as two:
        yield one, two


def test_vlm_metrics_count_requests_by_route_and_status(vlm: tuple[AppServer, AppServer]) -> None:
    one, two = vlm
    with httpx.Client(base_url=one.url, timeout=30.0) as http:
        for _ in range(3):
            assert http.post(CHAT, json=chat("a b")).status_code == 200
        assert http.post(CHAT, json={"messages": []}).status_code == 400
        assert (
            http.post(CHAT, content=b"x" * 5000, headers={"content-type": "application/json"}).status_code
            == 413
        )
        assert http.get("/no/such/page").status_code == 404
        reply = http.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    page = samples(reply.text)
    total = "interleave_thinker_http_requests_total"
    assert value(page, total, route=CHAT, method="POST", status="200") == 3
    assert value(page, total, route=CHAT, method="POST", status="400") == 1
    assert value(page, total, route=CHAT, method="POST", status="413") == 1  # refused by the body limit
    assert value(page, total, route="other", method="GET", status="404") == 1  # raw paths never become labels
    assert value(page, "interleave_thinker_http_request_duration_seconds_count", route=CHAT) == 5
    assert value(page, "interleave_thinker_http_requests_in_flight") == 1  # this scrape
    assert value(page, "interleave_thinker_vlm_tokens_total", kind="completion") == 3 * 3
    assert value(page, "interleave_thinker_vlm_tokens_total", kind="prompt") == 3 * 2
    assert value(page, "interleave_thinker_vlm_cancelled_total") == 0
    # The second app, in the same process, saw none of it.
    other = samples(httpx.get(f"{two.url}/metrics", timeout=30.0).text)
    assert value(other, total, route=CHAT, method="POST", status="200") == 0
    assert (
        value(other, total, route="/metrics", method="GET", status="200") == 0
    )  # its own scrape is in flight


class StubPool:
    """The shape of ``WorkerPool.describe()`` (the real pool is exercised by the slow test below)."""

    def __init__(self) -> None:
        self.figures: dict[str, Any] = {"queue_depth": 2, "in_flight": 1, "capacity": 9, "workers": []}
        self.figures["workers"] = [
            {"index": 0, "device": "cpu", "state": "busy", "completed": 4, "failed": 1, "restarts": 0},
            {"index": 1, "device": "cpu", "state": "restarting", "completed": 2, "failed": 0, "restarts": 3},
        ]

    def describe(self) -> dict[str, Any]:
        return self.figures


def test_generator_registry_holds_outcomes_latencies_and_the_pool() -> None:
    metrics = ServiceMetrics()
    metrics.registry.register(PoolCollector(StubPool().describe, metrics.started))
    for seconds in (0.2, 0.3, 4.0):
        metrics.record("completed", latency=seconds, pipeline=seconds / 2)
    metrics.record("rejected")
    page = samples(generate_latest(metrics.registry).decode())
    name = "interleave_thinker_generator_"
    assert value(page, f"{name}requests_total", outcome="completed") == 3
    assert value(page, f"{name}requests_total", outcome="rejected") == 1
    assert (name + "requests_total", frozenset({("outcome", "timed_out")})) in page  # present at 0
    assert value(page, f"{name}request_duration_seconds_count") == 3
    assert value(page, f"{name}request_duration_seconds_sum") == pytest.approx(4.5)
    assert value(page, f"{name}request_duration_seconds_bucket", le="0.25") == 1
    assert value(page, f"{name}pipeline_duration_seconds_bucket", le="0.25") == 2
    assert (value(page, f"{name}queue_depth"), value(page, f"{name}in_flight")) == (2, 1)
    assert value(page, f"{name}capacity") == 9
    assert value(page, f"{name}worker_up", worker="0", device="cpu") == 1
    assert value(page, f"{name}worker_up", worker="1", device="cpu") == 0
    assert value(page, f"{name}worker_restarts_total", worker="1", device="cpu") == 3
    assert value(page, f"{name}worker_completed_total", worker="0", device="cpu") == 4
    assert metrics.snapshot()["completed"] == 3  # the JSON figures agree


@pytest.mark.slow
def test_generator_service_metrics_after_known_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    from interleave_thinker.server.generator import GeneratorProcess
    from tests.helpers.served import SMALL, service_env

    env = {**service_env(), TOKEN_ENV: "metrics-token"}
    service = GeneratorProcess(
        "tiny:generator", workers=1, device="cpu", args=("--api-key-env", TOKEN_ENV), env=env
    ).__enter__()
    try:
        auth = {"Authorization": "Bearer metrics-token"}
        with httpx.Client(base_url=service.url, headers=auth, timeout=120.0) as http:
            for seed in range(3):
                assert http.post("/edit", json={"prompt": "p", "seed": seed, **SMALL}).status_code == 200
            assert http.post("/edit", content=b"{").status_code == 400
            assert httpx.get(f"{service.url}/metrics", timeout=30.0).status_code == 401  # behind the token
            page = samples(http.get("/metrics").text)
            figures = http.get("/metrics.json").json()
    finally:
        assert service.stop() == 0
    name = "interleave_thinker_generator_"
    assert value(page, f"{name}requests_total", outcome="completed") == 3 == figures["completed"]
    assert value(page, f"{name}requests_total", outcome="bad_request") == 1 == figures["bad_request"]
    assert value(page, f"{name}request_duration_seconds_count") == 3
    assert (
        value(page, "interleave_thinker_http_requests_total", route="/edit", method="POST", status="200") == 3
    )
    assert (
        value(page, "interleave_thinker_http_requests_total", route="/edit", method="POST", status="400") == 1
    )
    assert value(page, f"{name}worker_completed_total", worker="0", device="cpu") == 3
    assert value(page, f"{name}worker_up", worker="0", device="cpu") == 1
    assert value(page, f"{name}queue_depth") == 0 == figures["queue_depth"]
    assert value(page, f"{name}capacity") == figures["capacity"]
