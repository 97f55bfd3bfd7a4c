"""Prometheus text format for the services' ``GET /metrics``, as vLLM and TGI expose theirs.

Each app owns a :class:`prometheus_client.CollectorRegistry` (never the global one), so two apps in one
process (tests, a notebook) keep separate figures. Every name starts with ``interleave_thinker_`` and
ends with its unit (``_seconds``, ``_total``). :class:`RequestMetrics` counts every HTTP request by route
template (never the raw path: a scanner's random URLs must not grow the registry), method and status.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response

from interleave_thinker.server.asgi import HTTPMiddleware

PREFIX = "interleave_thinker_"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds: from a health check to a slow 1024² generation on CPU."""
OTHER_ROUTE = "other"
"""The route label of a request to a path the app does not serve."""


class HTTPMetrics:
    """Requests by route, method and status; their latency; requests in flight."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            f"{PREFIX}http_requests",
            "HTTP requests answered, by route template, method and status code.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            f"{PREFIX}http_request_duration_seconds",
            "Time from a request's arrival to the end of its reply, by route template.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            f"{PREFIX}http_requests_in_flight", "HTTP requests being handled now.", registry=registry
        )


def _route(scope: dict[str, Any]) -> str:
    """The matched route's template; before routing (a 413 from a middleware) the path when the app
    serves it, else ``other``."""
    route = getattr(scope.get("route"), "path", None)
    if isinstance(route, str):
        return route
    served = {getattr(r, "path", None) for r in getattr(scope.get("app"), "routes", [])}
    return scope["path"] if scope.get("path") in served else OTHER_ROUTE


@dataclass
class RequestMetrics(HTTPMiddleware):
    """ASGI middleware feeding :class:`HTTPMetrics`; add it last so it sees every reply, refusals included."""

    metrics: HTTPMetrics

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        started = time.perf_counter()
        status = 500  # an app that raises before replying

        async def send_counted(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_counted)
        finally:
            self.metrics.in_flight.dec()
            route = _route(scope)
            self.metrics.requests.labels(route, scope.get("method", ""), str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)


class CountFrom(Collector):
    """A counter whose value another object already keeps (read at scrape time, never copied)."""

    def __init__(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self.name, self.documentation, self.read = name, documentation, read

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.read())


def metrics_reply(registry: CollectorRegistry) -> Response:
    """``GET /metrics``: the registry in the Prometheus text format."""
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
