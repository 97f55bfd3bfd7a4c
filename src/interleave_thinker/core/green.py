"""Synchronous code that waits cooperatively: each batch request runs in a greenlet on the event loop.

Why: the step loop and the remote transport are written once, synchronously (``run``, the tests and the
Python API call them directly). The batch scheduler wants thousands of requests in flight without a
thread each. :func:`run_green` runs a plain function in a new greenlet from a coroutine; wherever that
function reaches a blocking point written with :func:`await_only` (the HTTP transport, the retry sleep,
a backend's slots), the greenlet switches back to the coroutine, which awaits on the event loop and
switches in again with the result. Outside such a greenlet (:func:`in_green` is False) the same calls
block as plain synchronous code, so nothing changes for ``run``.

The waiting primitives here (:class:`Semaphore`, :class:`Local`, :func:`sleep`, :func:`result`,
:func:`call_blocking`) work from threads and greenlets alike: a threading primitive held across a
switch would stall every request on the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

import greenlet

logger = logging.getLogger(__name__)
T = TypeVar("T")


class _Green(greenlet.greenlet):
    """A greenlet started by :func:`run_green`: its parent awaits what it hands over."""


def in_green() -> bool:
    """True inside :func:`run_green`: blocking points should then await on the running loop."""
    return isinstance(greenlet.getcurrent(), _Green)


def await_only(awaitable: Awaitable[T]) -> T:
    """Wait for ``awaitable`` on the event loop from synchronous code running under :func:`run_green`;
    its result is returned, its exception raised here."""
    current = greenlet.getcurrent()
    if not isinstance(current, _Green):
        if isinstance(awaitable, Coroutine):
            awaitable.close()  # never to run: no "never awaited" warning
        raise RuntimeError("await_only() called outside run_green(): use the synchronous path instead")
    parent = current.parent
    assert parent is not None
    result: T = parent.switch(awaitable)
    return result


async def run_green(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in a new greenlet, awaiting (on this loop) whatever it passes to
    :func:`await_only`; its return value is returned, its exception raised."""
    task = _Green(fn, parent=greenlet.getcurrent())
    task.gr_context = contextvars.copy_context()
    handed: Any = task.switch(*args)
    while not task.dead:
        try:
            value = await handed
        except BaseException as exc:  # the greenlet sees the awaitable's error (or the cancellation)
            handed = task.throw(exc)
        else:
            handed = task.switch(value)
    result: T = handed
    return result


def sleep(seconds: float) -> None:
    """``time.sleep``, or ``asyncio.sleep`` inside a greenlet (the other requests go on meanwhile)."""
    if in_green():
        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def result(future: Future[T]) -> T:
    """A concurrent future's result, waited for without blocking the loop inside a greenlet."""
    if in_green():
        return await_only(asyncio.wrap_future(future))
    return future.result()


def lazy_pool(threads: int, name: str) -> Callable[[], ThreadPoolExecutor]:
    """A function returning one thread pool, made on its first call (a process that never runs a batch
    never starts its threads): the ``executor`` argument of :func:`call_blocking`."""
    pool: list[ThreadPoolExecutor] = []
    lock = threading.Lock()

    def get() -> ThreadPoolExecutor:
        with lock:
            if not pool:
                pool.append(ThreadPoolExecutor(threads, thread_name_prefix=name))
            return pool[0]

    return get


def call_blocking(executor: Callable[[], Executor], fn: Callable[[], T]) -> T:
    """``fn()`` (CPU-bound or blocking, e.g. a model's forward pass): inside a greenlet it runs in the
    executor ``executor()`` returns, so the loop keeps serving other requests; outside, right here."""
    if not in_green():
        return fn()
    return await_only(asyncio.get_running_loop().run_in_executor(executor(), fn))


class _ThreadWaiter:
    def __init__(self) -> None:
        self._event = threading.Event()

    def wake(self) -> None:
        self._event.set()

    def wait(self) -> None:
        self._event.wait()


class _GreenWaiter:
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._future: asyncio.Future[None] = self._loop.create_future()

    def wake(self) -> None:
        self._loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    def wait(self) -> None:
        await_only(self._future)


class Semaphore:
    """A bounded semaphore for threads and greenlets alike (first come, first served): a greenlet waits
    on the loop, a thread on an event. A waiter that is cancelled passes on a slot it was handed."""

    def __init__(self, value: int) -> None:
        self.value = value
        self._free = value
        self._guard = threading.Lock()
        self._waiters: deque[_ThreadWaiter | _GreenWaiter] = deque()

    def acquire(self) -> None:
        with self._guard:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            waiter = _GreenWaiter() if in_green() else _ThreadWaiter()
            self._waiters.append(waiter)
        try:
            waiter.wait()
        except BaseException:
            with self._guard:
                handed = waiter not in self._waiters
                if not handed:
                    self._waiters.remove(waiter)
            if handed:
                self.release()
            raise

    def release(self) -> None:
        with self._guard:
            if self._waiters:
                self._waiters.popleft().wake()  # the slot goes straight to the first waiter
            elif self._free >= self.value:
                raise ValueError("Semaphore released more often than acquired")
            else:
                self._free += 1

    def __enter__(self) -> Semaphore:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def Lock() -> Semaphore:
    """A lock that may be held across a blocking point inside a greenlet (``threading.Lock`` may not)."""
    return Semaphore(1)


class Local:
    """Attributes per greenlet inside :func:`run_green`, per thread elsewhere (``threading.local``
    is shared by every request on the loop's thread)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", weakref.WeakKeyDictionary())

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[greenlet.getcurrent()][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._values.setdefault(greenlet.getcurrent(), {})[name] = value


_finalizers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Callable[[], Awaitable[None]]]] = (
    weakref.WeakKeyDictionary()
)


def at_loop_end(finalizer: Callable[[], Awaitable[None]]) -> None:
    """Run ``finalizer()`` when the owner of the running loop calls :func:`finish_loop` (e.g. close
    the connections a transport opened on this loop, which cannot be closed once it has stopped)."""
    _finalizers.setdefault(asyncio.get_running_loop(), []).append(finalizer)


async def finish_loop() -> None:
    """Run the finalizers registered for the running loop; a failing one is logged, not raised."""
    for finalizer in _finalizers.pop(asyncio.get_running_loop(), []):
        try:
            await finalizer()
        except Exception as exc:
            logger.warning("closing a per-loop resource: %s: %s", type(exc).__name__, exc)
