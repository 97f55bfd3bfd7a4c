"""Served backends of GPU-like latency for the scale rows of ``bench_scheduler.py``, in their own process.

One uvicorn process on 127.0.0.1 answers the OpenAI chat API (planner and critic, told apart by the
``model`` field) and vLLM-Omni's images API (the generator), reusing the test doubles: the rule-based
replies of ``testing/doubles/scripted_models`` (a plan of 2-3 steps; a verdict that accepts on the first
or the second attempt) and the vLLM-Omni stand-in of ``testing/doubles/omni`` with a flat-colour engine.
Every handler waits with ``await asyncio.sleep(latency)``, so one thread holds thousands of calls open
and the server's CPU is never counted as the batch's. ``GET /stats`` tells calls per role, the most in
flight at once, and the wall clock of the first call's start and the last call's end.

Run: ``python benchmarks/_served.py PLANNER_S CRITIC_S GENERATOR_S`` (prints ``port N`` when ready).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.responses import Response

from interleave_thinker.testing.doubles.omni import OmniState, build_app, scripted_engine
from interleave_thinker.testing.doubles.scripted_models import State, chat_reply

GENERATOR_PATHS = ("/v1/images/generations", "/v1/images/edits")


class Stats:
    """Calls per role, the most in flight at once, and the first start / last end (``time.time()``)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.now = self.peak = 0
        self.first: float | None = None
        self.last: float | None = None

    async def timed(self, role: str, latency: float, answer: Callable[[], Awaitable[Any]]) -> Any:
        self.first = self.first or time.time()
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(latency)
            return await answer()
        finally:
            self.now -= 1
            self.calls[role] = self.calls.get(role, 0) + 1
            self.last = time.time()

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "peak": self.peak, "first": self.first, "last": self.last}


def http_parser() -> str:
    """uvicorn's HTTP parser for the doubles: ``httptools`` (compiled) when installed, as the real engines
    run it (vLLM and vLLM-Omni install ``uvicorn[standard]`` through ``fastapi[standard]``), else ``h11``
    (pure Python: about 40 % more of the doubles' CPU in the 1,024 row, on the cores the batch needs).
    ``pip install -e '.[bench]'`` installs it."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def build(latency: dict[str, float]) -> Latency:
    """vLLM-Omni's routes with the chat route beside them; every POST waits its role's latency."""
    app = build_app(OmniState(engine=scripted_engine, model_name="sim-generator"))
    stats = Stats()

    @app.get("/stats")
    async def read_stats() -> dict[str, Any]:
        return {**stats.as_dict(), "http": http_parser()}

    return Latency(app, stats, latency)


class Latency:
    """The served roles as a plain ASGI app in front of the double's FastAPI app: the chat route answered
    here, the generator routes passed on, each after its role's latency.

    Why not FastAPI routes and ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` spawns a
    task group and memory streams per request and FastAPI's routing solves dependencies per request;
    under a wave of 1,024 calls that was most of this process's CPU (13.4 s of it in a 1,024 row), on the
    two cores the batch it stands beside needs too. The real engines run on machines of their own."""

    def __init__(self, app: FastAPI, stats: Stats, latency: dict[str, float]) -> None:
        self.app, self.stats, self.latency, self.replies = app, stats, latency, State()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        post = scope["type"] == "http" and scope["method"] == "POST"
        if post and scope["path"] in GENERATOR_PATHS:
            await self.stats.timed(
                "generator", self.latency["generator"], lambda: self.app(scope, receive, send)
            )
        elif post and scope["path"] == "/v1/chat/completions":
            body = json.loads(await _body(receive))
            role = "planner" if body.get("model") == "planner" else "critic"

            async def answer() -> None:
                reply = Response(_json(chat_reply(body, self.replies)), media_type="application/json")
                await reply(scope, receive, send)

            await self.stats.timed(role, self.latency[role], answer)
        else:
            await self.app(scope, receive, send)


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def main() -> None:
    planner, critic, generator = (float(v) for v in sys.argv[1:4])
    app = build({"planner": planner, "critic": critic, "generator": generator})
    sock = socket.socket(
        socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )  # asyncio sets TCP_NODELAY only then
    sock.bind(("127.0.0.1", 0))
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        ws="none",
        lifespan="off",
        backlog=4096,
        timeout_keep_alive=120,
        http=http_parser(),
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
