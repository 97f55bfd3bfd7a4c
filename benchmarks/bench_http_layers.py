"""CPU per backend call of each layer of the batch's HTTP path, side by side in one run.

Why: in the 1,024-request scale row of ``bench_scheduler.py`` the batch's loop thread spends about
1.1-1.3 ms of CPU per backend call, and that work, taken in bursts of a lock-step wave, is what holds
chain / wall under 0.9 (docs/notes/scale.md). This script says how much of it is the HTTP path alone, layer
by layer, so a leaner path can be judged by one number: N chat-sized POSTs at C in flight against a
trivial server in its own process (a fixed 600-character reply), and the CPU seconds of this process
divided by N, for:

- aiohttp alone (a session without cookies, the floor of the current transport);
- aiohttp awaited from greenlets (``core/green.py``), as the batch's requests wait;
- ``httpx.Client`` over a transport that answers at once (httpx's own share: building the request,
  encoding JSON, headers, cookies, reading the reply);
- ``httpx.Client`` over ``GreenTransport`` in greenlets (the batch's path before ``GreenClient``);
- the batch's path: ``GreenClient`` (httpx's client, its send machinery skipped in a greenlet) over
  ``GreenTransport``.

Run: python benchmarks/bench_http_layers.py [--requests 6000] [--concurrency 512] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

REPLY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "y" * 600}}],
    }
).encode()
PAYLOAD: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "x" * 2000}],
    "max_tokens": 64,
}


async def _trivial_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(REPLY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": REPLY})


def serve() -> None:
    """The trivial server (``python bench_http_layers.py serve``): prints ``port N`` when bound."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        _trivial_app, log_level="warning", lifespan="off", backlog=4096, timeout_keep_alive=120
    )
    uvicorn.Server(config).run(sockets=[sock])


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _aiohttp(url: str, n: int, c: int, green: bool) -> None:
    import aiohttp

    from interleave_thinker.core.green import await_only, run_green

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
    )
    slots = asyncio.Semaphore(c)

    async def post() -> bytes:
        body = json.dumps(PAYLOAD).encode()
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as reply:
            return await reply.read()

    def in_green() -> Any:
        return json.loads(await_only(post()))

    async def one() -> None:
        async with slots:
            if green:
                await run_green(in_green)
            else:
                json.loads(await post())

    await asyncio.gather(*(one() for _ in range(n)))
    await session.close()


async def _green_transport(url: str, n: int, c: int, lean: bool) -> None:
    from interleave_thinker.backends.green_transport import GreenClient, GreenTransport
    from interleave_thinker.core.green import finish_loop, run_green

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    kind = GreenClient if lean else httpx.Client
    client = kind(transport=GreenTransport(limits), timeout=60)
    slots = asyncio.Semaphore(c)

    def call() -> Any:
        return client.post(url, json=PAYLOAD).json()

    async def one() -> None:
        async with slots:
            await run_green(call)

    await asyncio.gather(*(one() for _ in range(n)))
    await finish_loop()


class _AtOnce(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        headers = [("content-type", "application/json"), ("content-length", str(len(REPLY)))]
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(REPLY))


def _httpx_alone(url: str, n: int) -> None:
    client = httpx.Client(transport=_AtOnce(), timeout=60)
    for _ in range(n):
        client.post(url, json=PAYLOAD).json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=512)
    parser.add_argument(
        "--rounds", type=int, default=2, help="each layer is measured this many times, interleaved"
    )
    args = parser.parse_args()
    n, c = args.requests, args.concurrency
    server = subprocess.Popen([sys.executable, __file__, "serve"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}/v1/chat/completions"
        time.sleep(0.5)
        layers: list[tuple[str, Callable[[], None]]] = [
            ("aiohttp alone", lambda: asyncio.run(_aiohttp(url, n, c, green=False))),
            ("aiohttp awaited from greenlets", lambda: asyncio.run(_aiohttp(url, n, c, green=True))),
            ("httpx.Client, a transport answering at once", lambda: _httpx_alone(url, n)),
            (
                "httpx.Client + GreenTransport in greenlets",
                lambda: asyncio.run(_green_transport(url, n, c, False)),
            ),
            (
                "GreenClient + GreenTransport in greenlets",
                lambda: asyncio.run(_green_transport(url, n, c, True)),
            ),
        ]
        figures: dict[str, list[float]] = {name: [] for name, _ in layers}
        for _ in range(args.rounds):
            for name, run in layers:
                before = _cpu_s()
                run()
                figures[name].append((_cpu_s() - before) / n * 1000)
    finally:
        server.terminate()
        server.wait(10)
    floor = min(figures["aiohttp alone"])
    print(f"{n} POSTs at {c} in flight, CPU ms per request of this process (each round), and x aiohttp alone")
    for name, values in figures.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {name:46}{shown:>24}{min(values) / floor:>8.2f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    else:
        main()
