"""The batch scheduler keeps N requests in flight without N threads: requests are greenlets on one loop.

The scale test drives a batch through real HTTP on 127.0.0.1 (an asyncio server whose every reply waits
on its loop) and counts this process's threads while the calls are in flight; the unit tests pin the
waiting primitives of ``core/green.py`` and where the limiters run a call (on the loop for a served
backend, in a small executor for a blocking one, micro-batched when asked).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.backends.protocols import Message
from interleave_thinker.backends.remote import EndpointPool, RemoteCaller, RetrySettings
from interleave_thinker.core import green
from interleave_thinker.core.errors import BackendError
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.limits import BackendStats, LimitedVLM
from interleave_thinker.runtime.scheduler import BatchOutcome, BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.doubles.async_models import AsyncModels
from tests.helpers.common import stable

THREADS_MAX = 8
"""Threads a batch may add to this process whatever its concurrency: the run-file writers
(``runtime/file_writes.py``, 4) and room to spare, nothing per request."""


async def gather_green(fn: Any, args: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*(green.run_green(fn, a) for a in args)))


# -- core/green.py -----------------------------------------------------------------------------------


def test_await_only_returns_values_and_raises_errors_inside_run_green() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def fail() -> None:
        raise KeyError("from the loop")

    def body(x: int) -> tuple[bool, int, str]:
        try:
            green.await_only(fail())
        except KeyError as exc:
            caught = str(exc)
        return green.in_green(), green.await_only(double(x)) + green.await_only(double(1)), caught

    assert asyncio.run(gather_green(body, [1, 5])) == [
        (True, 4, "'from the loop'"),
        (True, 12, "'from the loop'"),
    ]
    assert green.in_green() is False
    with pytest.raises(RuntimeError, match="outside run_green"):
        green.await_only(double(1))

    def boom(_: int) -> None:
        raise ValueError("from the greenlet")

    with pytest.raises(ValueError, match="from the greenlet"):
        asyncio.run(gather_green(boom, [0]))


def test_semaphore_bounds_greenlets_and_threads_alike() -> None:
    slots = green.Semaphore(3)
    now, peak = [0], [0]

    def hold(_: int) -> None:
        with slots:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
            green.sleep(0.01)
            now[0] -= 1

    asyncio.run(gather_green(hold, list(range(20))))
    assert peak[0] == 3
    peak[0] = 0
    lock = threading.Lock()

    def in_thread() -> None:
        with slots:
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            green.sleep(0.01)
            with lock:
                now[0] -= 1

    threads = [threading.Thread(target=in_thread) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 3 and now[0] == 0
    with pytest.raises(ValueError, match="released more often"):
        slots.release()


def test_a_cancelled_waiter_leaves_no_slot_behind() -> None:
    slots = green.Semaphore(1)

    def hold() -> None:
        slots.acquire()
        green.sleep(0.05)

    def take_and_give(i: int) -> int:
        slots.acquire()
        slots.release()
        return i

    async def main() -> list[int]:
        holder = asyncio.ensure_future(green.run_green(hold))
        await asyncio.sleep(0.01)
        waiter = asyncio.ensure_future(green.run_green(slots.acquire))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder
        slots.release()  # the holder's slot: free again, none lost to the cancelled waiter
        return await gather_green(take_and_give, [1, 2])

    assert asyncio.run(main()) == [1, 2]


def test_local_is_per_greenlet() -> None:
    local = green.Local()
    local.value = "thread"

    def body(i: int) -> tuple[int, int]:
        local.value = i
        green.sleep(0.01 * (3 - i))  # the others write meanwhile
        return i, local.value

    assert asyncio.run(gather_green(body, [0, 1, 2])) == [(0, 0), (1, 1), (2, 2)]
    assert local.value == "thread"
    assert getattr(green.Local(), "value", None) is None


# -- limits.py: where a call runs ------------------------------------------------------------------


class Echo:
    """A VLM that records the thread of each call and the size of each batch."""

    name = "echo"

    def __init__(self, cooperative: bool) -> None:
        self.cooperative = cooperative
        self.threads: list[str] = []
        self.batches: list[int] = []

    def chat(self, messages: list[Message], *, max_new_tokens: int = 4096, temperature: float = 0.0) -> str:
        self.threads.append(threading.current_thread().name)
        return f"{messages[0]['content']}:{max_new_tokens}"

    def chat_batch(self, batch: list[list[Message]], *, max_new_tokens: int, temperature: float) -> list[str]:
        self.batches.append(len(batch))
        return [self.chat(m, max_new_tokens=max_new_tokens, temperature=temperature) for m in batch]


def ask(limited: LimitedVLM, prompts: list[str]) -> list[str]:
    def one(prompt: str) -> str:
        return limited.chat([{"role": "user", "content": prompt}], max_new_tokens=7)

    return asyncio.run(gather_green(one, prompts))


@pytest.mark.parametrize("cooperative", [True, False])
def test_blocking_backends_run_off_the_loop_and_served_ones_on_it(cooperative: bool) -> None:
    inner = Echo(cooperative)
    limited = LimitedVLM(inner, BackendStats("planner", 2))  # type: ignore[arg-type]
    assert ask(limited, ["a", "b", "c"]) == ["a:7", "b:7", "c:7"]
    on_loop = {name == threading.main_thread().name for name in inner.threads}
    assert on_loop == {cooperative}
    assert limited.stats.calls == 3
    limited.close()


def test_micro_batching_still_gathers_calls_from_greenlets() -> None:
    inner = Echo(cooperative=False)
    limited = LimitedVLM(inner, BackendStats("critic", 8), micro_batch=True, max_wait=0.05)  # type: ignore[arg-type]
    prompts = [f"p{i}" for i in range(16)]
    assert ask(limited, prompts) == [f"{p}:7" for p in prompts]
    assert sum(inner.batches) == 16 and max(inner.batches) > 1 and len(inner.batches) < 16
    assert limited.stats.calls == 16


# -- the transport: one seam, the same behaviour in a greenlet and in a thread ----------------------

CHAT = {"messages": [{"role": "user", "content": 'User request: "a kite"\n'}]}


def one_call(base: str, timeout: float) -> str:
    """One chat call through a fresh caller (two tries): its reply, or the error and its cause."""
    retry = RetrySettings(max_retries=1, backoff_base=0.01, backoff_max=0.01, jitter=0.0, timeout=timeout)
    caller = RemoteCaller("chat", EndpointPool([base]), retry=retry)

    def request(client: httpx.Client, url: str, t: float) -> str:
        response = client.post(f"{url}/v1/chat/completions", json=CHAT, timeout=t)
        caller.check_status(response)
        return str(response.json()["choices"][0]["message"]["content"])[:40]

    try:
        return "ok " + caller.call(request)
    except BackendError as exc:
        return f"{type(exc.__cause__).__name__}: {exc}"
    finally:
        caller.close()


def test_the_transport_behaves_alike_in_a_greenlet_and_in_a_thread(models: tuple[AsyncModels, str]) -> None:
    _, url = models
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens there
    # The read timeout: a server that holds its reply 2 s, asked with 0.5 s, so connecting (well under
    # 0.5 s on loopback, even on a loaded machine) never eats the budget: a 0.01 s timeout against the
    # 0.05 s server was sometimes a ConnectTimeout here, a test that passed only on a quiet machine.
    with AppServer(AsyncModels(delay=2.0)) as slow:
        cases = [(url, 5.0), (closed, 5.0), (slow.url, 0.5)]
        in_thread = [one_call(*case) for case in cases]

        async def main() -> list[str]:
            try:
                return [await green.run_green(one_call, *case) for case in cases]
            finally:
                await green.finish_loop()

        in_green = asyncio.run(main())
    assert in_thread[0] == in_green[0] and in_thread[0].startswith("ok <think>plan</think>")
    refused = f"ConnectError: chat: 2 tries failed; last error: {closed}: ConnectError: "
    assert in_thread[1].startswith(refused) and in_green[1].startswith(refused)  # the OS's words differ
    timed_out = f"ReadTimeout: chat: 2 tries failed; last error: {slow.url}: timed out after 0.5s"
    assert in_thread[2] == in_green[2] == timed_out


async def _hop_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/hop`` redirects to ``/end``; ``/end`` answers its path and sets a cookie."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/hop":
        status, headers, body = 302, [(b"location", b"/end")], b""
    else:
        status, headers, body = (
            200,
            [(b"set-cookie", b"seen=1; Path=/")],
            json.dumps({"path": scope["path"]}).encode(),
        )
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _port_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers the client's own port: which connection carried the call."""
    if scope["type"] != "http":
        return
    body = json.dumps({"port": scope["client"][1]}).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_the_served_backends_of_one_loop_share_its_connections() -> None:
    """A request's connection follows it from backend to backend (one pool per loop, not per caller); a
    caller that closes leaves the pool to the others, the last one closes it, and a thread's calls never
    touch it."""

    def port(caller: RemoteCaller) -> int:
        return int(caller.call(lambda client, url, t: client.get(f"{url}/", timeout=t).json()["port"]))

    with AppServer(_port_app) as server:

        def calls() -> list[int]:
            planner, critic = (RemoteCaller(n, EndpointPool([server.url])) for n in ("planner", "critic"))
            first, second = port(planner), port(critic)
            planner.close()
            third = port(critic)  # the pool outlives the caller that opened it
            critic.close()
            fresh = RemoteCaller("generator", EndpointPool([server.url]))
            fourth = port(fresh)  # the last user closed the pool: a new one, a new connection
            fresh.close()
            return [first, second, third, fourth]

        async def main() -> list[int]:
            try:
                return await green.run_green(calls)
            finally:
                await green.finish_loop()

        shared = asyncio.run(main())
        in_thread = calls()
    assert shared[0] == shared[1] == shared[2] != shared[3], shared
    assert in_thread[0] != in_thread[1], in_thread  # httpx's sync pools stay one per caller


def test_green_client_sends_plain_calls_itself_and_hands_the_rest_to_httpx() -> None:
    """In a greenlet a plain call skips httpx's send machinery (no redirect loop, no cookie jar); a call
    that asks for redirects still gets httpx's; outside a greenlet everything is httpx's own send."""
    from interleave_thinker.backends.green_transport import GreenClient, GreenTransport

    def calls(base: str) -> list[Any]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        with GreenClient(transport=GreenTransport(limits), timeout=10) as client:
            plain = client.get(f"{base}/end")
            hop = client.get(f"{base}/hop")
            kept = dict(client.cookies)
            followed = client.get(f"{base}/hop", follow_redirects=True)
            return [
                (plain.status_code, plain.json(), str(plain.request.url) == f"{base}/end"),
                (hop.status_code, hop.headers["location"], hop.content),
                (followed.status_code, followed.json(), [r.status_code for r in followed.history]),
                kept,
                dict(client.cookies),
            ]

    with AppServer(_hop_app) as server:
        in_thread = calls(server.url)

        async def main() -> list[Any]:
            try:
                return list(await green.run_green(calls, server.url))
            finally:
                await green.finish_loop()

        in_green = asyncio.run(main())
    assert (
        in_thread[:3]
        == in_green[:3]
        == [
            (200, {"path": "/end"}, True),
            (302, "/end", b""),
            (200, {"path": "/end"}, [302]),
        ]
    )
    assert in_thread[3:] == [{"seen": "1"}, {"seen": "1"}]  # httpx's send keeps every reply's cookie
    assert in_green[3:] == [{}, {"seen": "1"}]  # the plain calls skipped it; the followed one was httpx's


# -- the scale test ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models() -> Iterator[tuple[AsyncModels, str]]:
    app = AsyncModels(delay=0.05)
    with AppServer(app) as server:
        yield app, server.url


def rss_mb() -> float:
    """This process's resident memory now (0 where /proc is absent)."""
    status = Path("/proc/self/status")
    found = re.search(r"VmRSS:\s+(\d+)", status.read_text()) if status.exists() else None
    return int(found.group(1)) / 1024 if found else 0.0


def run_batch(
    url: str, out: Path, n: int, concurrency: int, samples: list[tuple[int, float]]
) -> BatchOutcome:
    """``n`` requests at ``concurrency`` through served planner, critic and generator, each backend
    allowed ``concurrency`` calls; ``samples`` gets this process's threads and RSS as each request ends."""
    chat = f"openai:{url}/v1#scripted"
    overrides = {"planner": chat, "critic": chat, "generator": f"http:{url}"}
    config = PipelineConfig.resolve(preset="tiny", overrides=overrides, environ={})
    items = [BatchItem(f"r{i:03d}", f"draw thing {i}") for i in range(n)]
    store = RunStore(out)
    store.open({"input": "in", "ids": [i.id for i in items], "settings": {}}, resume=False)
    limits = dict.fromkeys(("planner", "critic", "generator"), concurrency)
    settings = BatchSettings(concurrency=concurrency, limits=limits)
    runner = BatchRunner(
        Pipeline.from_config(config),
        store,
        settings,
        lambda *_: samples.append((threading.active_count(), rss_mb())),
    )
    try:
        return runner.run(items)
    finally:
        runner.pipeline.close()


def traces(out: Path) -> dict[str, Any]:
    return {
        p.parent.name: stable(json.loads(p.read_text())) for p in sorted(out.glob("requests/*/trace.json"))
    }


@pytest.mark.parametrize("n", [48, pytest.param(200, marks=pytest.mark.slow)])
def test_hundreds_in_flight_on_a_few_threads_with_the_traces_of_one_at_a_time(
    models: tuple[AsyncModels, str], tmp_path: Path, n: int
) -> None:
    """``n`` requests at concurrency ``n``: the threads stay the same few (the thread-per-request
    scheduler had ``n`` more), the server holds about ``n`` calls at once, and every trace is the one a
    batch at concurrency 1 writes."""
    app, url = models
    before, rss_before = threading.active_count(), rss_mb()
    app.peak = 0
    samples: list[tuple[int, float]] = []
    wide = run_batch(url, tmp_path / "wide", n, n, samples)
    threads = [count for count, _ in samples]
    assert set(wide.finished.values()) == {"succeeded"} and len(wide.finished) == n
    assert app.peak >= n // 2  # the server really held hundreds of calls at once
    assert len(threads) == n and max(threads) - before <= THREADS_MAX
    assert max(threads) <= wide.threads_peak <= before + THREADS_MAX
    per_request = (max(rss for _, rss in samples) - rss_before) * 1024 / n  # an upper bound, printed only
    print(
        f"{n} requests at concurrency {n}: {app.peak} calls in flight, threads {before} -> {max(threads)}, "
        f"RSS +{per_request:.0f} KB per request in flight"
    )

    app.delay = 0.0  # one at a time: the replies (not the waits) decide the traces
    try:
        run_batch(url, tmp_path / "narrow", n, 1, [])
    finally:
        app.delay = 0.05
    assert traces(tmp_path / "wide") == traces(tmp_path / "narrow")
    assert len(traces(tmp_path / "wide")) == n


@pytest.mark.slow
def test_local_tiny_models_micro_batch_across_greenlets_with_the_traces_of_one_at_a_time(
    tmp_path: Path,
) -> None:
    """Local models keep their serialised (executor) and micro-batched calls under the greenlet
    scheduler: greedy planner and critic calls from concurrent requests share batches, and every trace
    equals the one-at-a-time batch's."""
    config = PipelineConfig.resolve(
        preset="tiny", overrides={"agents": {"retry_temperature": 0.0, "max_new_tokens": 24}}, environ={}
    )
    items = [BatchItem(f"t{i}", f"draw a {c} square") for i, c in enumerate(("red", "blue", "green", "tan"))]

    def run(out: Path, concurrency: int, micro_batch: set[str]) -> BatchOutcome:
        store = RunStore(out)
        store.open({"input": "in", "ids": [i.id for i in items], "settings": {}}, resume=False)
        settings = BatchSettings(concurrency=concurrency, micro_batch=micro_batch, max_wait=0.2)
        runner = BatchRunner(Pipeline.from_config(config), store, settings)
        try:
            return runner.run(items)
        finally:
            runner.pipeline.close()

    together = run(tmp_path / "together", 4, {"planner", "critic"})
    alone = run(tmp_path / "alone", 1, set())
    assert together.finished == alone.finished
    planner = together.stats["planner"]
    assert planner.calls >= 4 and planner.batches < planner.calls  # some calls did share a batch
    assert alone.stats["planner"].batches == alone.stats["planner"].calls
    assert traces(tmp_path / "together") == traces(tmp_path / "alone")
