"""The FastAPI app: ``POST /edit`` (the authors' protocol), ``GET /health``, ``GET /metrics`` (Prometheus
text; ``GET /metrics.json`` the same figures as JSON), and the
OpenAI images API (:mod:`.openai_routes`) from the same workers, queue, limits, metrics and token.

Every ``/edit`` error reply has the protocol's shape, ``{"success": false, "error": "..."}``, so the authors'
clients print a useful message whatever went wrong. Replies to ``/edit`` carry an extra ``timings``
object (queueing, decode, pipeline, encode seconds) that their clients ignore.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from starlette.responses import Response

from interleave_thinker.core.errors import RequestError
from interleave_thinker.server.generator.guards import admit, check_token
from interleave_thinker.server.generator.metrics import PoolCollector, ServiceMetrics
from interleave_thinker.server.generator.openai_routes import RunJob, add_openai_routes
from interleave_thinker.server.generator.pool import ClientGone, JobTimeout, QueueFull, WorkerPool
from interleave_thinker.server.generator.protocol import EditJob, parse_edit_request
from interleave_thinker.server.generator.settings import ServiceSettings
from interleave_thinker.server.prometheus import HTTPMetrics, RequestMetrics, metrics_reply

logger = logging.getLogger(__name__)

PARSE_IN_THREAD_BYTES = 256 * 1024
"""Bodies above this are parsed off the event loop, so a 20 MB upload does not stall other requests."""
REPLY_STATUS = {"input": 400, "backend": 500, "crash": 500, "shutdown": 503}


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"success": False, "error": message}, status_code=status, headers=headers)


def create_app(settings: ServiceSettings, pool: WorkerPool | None = None) -> FastAPI:
    """The service's app; workers start with the app's lifespan unless ``pool`` already runs, and stop
    after the in-flight requests."""
    workers = pool or WorkerPool(settings)
    app = FastAPI(
        title="interleave-thinker generator",
        lifespan=_lifespan(workers),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    registry = CollectorRegistry()  # this app's own: two apps in one process keep separate figures
    metrics = ServiceMetrics(registry=registry)
    registry.register(PoolCollector(workers.describe, metrics.started))
    app.add_middleware(RequestMetrics, metrics=HTTPMetrics(registry))
    app.state.pool, app.state.metrics, app.state.settings = workers, metrics, settings

    @app.exception_handler(RequestError)
    async def refused(_: Request, exc: RequestError) -> JSONResponse:
        return error_reply(exc.status, exc.message, exc.headers)

    _add_status_routes(app)
    run_job = _job_runner(settings, workers, app.state.metrics)
    _add_edit_route(app, run_job)
    add_openai_routes(app, run_job)
    return app


def _lifespan(workers: WorkerPool) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not workers.started:
            await asyncio.to_thread(workers.start)
        try:
            yield
        finally:
            await asyncio.to_thread(workers.stop)

    return lifespan


def _add_status_routes(app: FastAPI) -> None:
    """``GET /health`` (for load balancers, open), ``GET /metrics`` and ``GET /metrics.json`` (behind the token)."""
    settings, metrics, workers = app.state.settings, app.state.metrics, app.state.pool

    @app.get("/health")
    async def health() -> JSONResponse:
        ready = workers.ready_workers()
        stopping = workers.stopping.is_set()
        # Every worker must be up: a node with a dead worker is out of a load balancer's rotation until
        # the worker is back (its requests still go to the live ones meanwhile).
        full = "ok" if ready == settings.workers else "degraded"
        status = "stopping" if stopping else (full if ready else "unavailable")
        body = {
            "status": status,
            "generator": settings.generator,
            "workers": settings.workers,
            "workers_ready": ready,
        }
        return JSONResponse(body, status_code=200 if status == "ok" else 503)

    @app.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        check_token(request, settings.api_key)
        return metrics_reply(metrics.registry)

    @app.get("/metrics.json")
    async def service_metrics(request: Request) -> JSONResponse:
        check_token(request, settings.api_key)
        return JSONResponse({"generator": settings.generator, **metrics.snapshot(), **workers.describe()})


def _add_edit_route(app: FastAPI, run_job: RunJob) -> None:
    settings, metrics = app.state.settings, app.state.metrics
    limits = {"max_pixels": settings.max_pixels, "max_prompt_chars": settings.max_prompt_chars}

    async def parse(body: bytes) -> EditJob:
        if len(body) > PARSE_IN_THREAD_BYTES:
            return await asyncio.to_thread(parse_edit_request, body, **limits)
        return parse_edit_request(body, **limits)

    @app.post("/edit")
    async def edit(request: Request) -> JSONResponse:
        arrived = time.monotonic()
        # 1. Check the request: token, size, JSON, image header, knobs.
        job = await admit(request, settings, metrics, parse)
        # 2. Queue it and wait for a worker, within the request's deadline, while the client waits.
        image, timings = await run_job(job, arrived, request)
        return JSONResponse({"success": True, "edited_image": image, "timings": timings})


def _job_runner(settings: ServiceSettings, workers: WorkerPool, metrics: ServiceMetrics) -> RunJob:
    async def run_job(job: EditJob, arrived: float, request: Request) -> tuple[str, dict[str, Any]]:
        """The base64 PNG and timings of one job; RequestError (counted) when it does not complete."""
        left = settings.timeout - (time.monotonic() - arrived)
        try:
            reply, handle = await workers.submit(job.to_message(), left, request.is_disconnected)
        except ClientGone:
            metrics.record("disconnected")
            raise RequestError(499, "The client closed the connection.") from None
        except QueueFull as exc:
            metrics.record("rejected")
            retry_after = max(1, math.ceil(metrics.snapshot()["latency_s"]["p50"]))
            raise RequestError(
                503, f"Service busy: {exc}; retry later.", {"Retry-After": str(retry_after)}
            ) from None
        except JobTimeout:
            metrics.record("timed_out")
            raise RequestError(
                504,
                f"Generation timed out: no reply within the service's --timeout of {settings.timeout:g}s.",
            ) from None
        # 3. Map the worker's reply.
        total = time.monotonic() - arrived
        if not reply["ok"]:
            status = REPLY_STATUS.get(reply["kind"], 500)
            metrics.record("bad_request" if status == 400 else "failed")
            raise RequestError(status, reply["error"])
        timings: dict[str, Any] = dict(reply["timings"])
        timings["queue_s"] = (handle.dispatched or handle.submitted) - handle.submitted
        timings["total_s"] = total
        metrics.record("completed", latency=total, pipeline=timings["pipeline_s"])
        return reply["image"], timings

    return run_job
