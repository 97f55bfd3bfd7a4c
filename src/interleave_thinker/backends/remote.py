"""What every served backend shares: an endpoint pool, retries with backoff and jitter, deadlines,
a concurrency limit, and the translation of transport failures into :class:`BackendError`.

Backends stay synchronous (one ``chat`` / ``generate`` method) and send through one ``httpx.Client``.
Its two blocking points, sending (:class:`~interleave_thinker.backends.green_transport.GreenTransport`)
and sleeping between tries (:func:`interleave_thinker.core.green.sleep`), suspend the request's greenlet
inside the batch scheduler instead of holding a thread, and block as usual everywhere else; the slots
are a :class:`interleave_thinker.core.green.Semaphore` for the same reason.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from interleave_thinker.backends.bounds import MAX_IMAGE_PIXELS, MAX_REPLY_BYTES, ReplyRefused, deadline_at
from interleave_thinker.backends.green_transport import GreenClient, GreenTransport
from interleave_thinker.backends.secrets import (
    credential_secrets,
    header_secrets,
    leaks,
    scrub,
    split_credentials,
)
from interleave_thinker.core import green
from interleave_thinker.core.config_sections import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError

logger = logging.getLogger(__name__)

MAX_RETRY_AFTER = 60.0
"""The longest a server's ``Retry-After`` makes us wait (its value is outside input: 1e6 or ``inf``
must not put a caller to sleep for days)."""


TRY_OVERHEAD = 1.0
"""Seconds allowed per try beyond its timeout in the default overall deadline (connection set-up, request
encoding, a busy client): without it, the last try of a loaded client was cut by the deadline."""


_REMOTE = RemoteOptions()
"""The ``remote`` section's defaults, which a backend built without settings takes: one place for them."""


_SAME_NAMES = ("max_retries", "backoff_base", "backoff_max", "timeout", "deadline", "max_image_pixels")
"""The fields of :class:`RetrySettings` that the ``remote`` section holds under the same name."""


@dataclass(frozen=True)
class RetrySettings:
    """How hard a served backend tries before giving up, and how much of a reply it takes in."""

    max_retries: int = _REMOTE.max_retries
    backoff_base: float = _REMOTE.backoff_base
    backoff_max: float = _REMOTE.backoff_max
    jitter: float = 0.5
    timeout: float = _REMOTE.timeout
    deadline: float | None = _REMOTE.deadline
    max_retry_after: float = MAX_RETRY_AFTER
    max_reply_bytes: int = MAX_REPLY_BYTES
    """A reply body (after its content-encoding) longer than this is refused while it streams in."""
    max_image_pixels: int = MAX_IMAGE_PIXELS
    """A reply image whose header declares more pixels is refused before it is decoded."""

    @classmethod
    def from_options(cls, options: RemoteOptions) -> RetrySettings:
        """The transport half of the user's ``remote`` config section."""
        same = {name: getattr(options, name) for name in _SAME_NAMES}  # a renamed field fails here, loudly
        return cls(**same, max_reply_bytes=int(options.max_reply_mb * 1024 * 1024))

    @property
    def total_deadline(self) -> float:
        """Seconds a call may take, retries included: ``deadline``, else what every try at its full
        timeout (plus :data:`TRY_OVERHEAD` for connecting and encoding) and the longest jittered backoff
        between tries add up to (1,553 s with the defaults), so that ``Retry-After`` and slow servers
        together can never stretch a call past a known bound, while a loaded client still gets every try
        it was promised."""
        if self.deadline is not None:
            return self.deadline
        tries = (self.max_retries + 1) * (self.timeout + TRY_OVERHEAD)
        return tries + self.max_retries * self.backoff_max * (1 + self.jitter)

    def delay(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Exponential backoff with multiplicative jitter; a server's ``Retry-After`` is a lower bound,
        itself capped at ``max_retry_after``."""
        base = min(self.backoff_max, self.backoff_base * (2 ** min(retry, 64)))
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        wanted = retry_after if retry_after is not None and math.isfinite(retry_after) else 0.0
        return max(base * spread, min(max(wanted, 0.0), self.max_retry_after))


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def _printable(text: str) -> str:
    """Server text made safe to print and store: no control characters, no lone surrogates. Not cut
    here: a message is scrubbed of secrets first and cut after, so no prefix of a key survives."""
    return _CONTROL.sub(" ", text.encode("utf-8", "replace").decode("utf-8", "replace")).strip()


def error_message(response: httpx.Response) -> str:
    """The server's own message in an error reply, whichever of the usual shapes it has: OpenAI and
    vLLM ``{"error": {"message"}}``, ``{"error": "..."}`` ("/edit", ``--api-key`` rejections), older
    vLLM ``{"message"}``, FastAPI ``{"detail": str | [pydantic errors]}``; else the body."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return _printable(str(error["message"]))
        if isinstance(error, str) and error:
            return _printable(error)
        if body.get("message"):
            return _printable(str(body["message"]))
        detail = body.get("detail")
        if isinstance(detail, str):
            return _printable(detail)
        if isinstance(detail, list):  # pydantic errors: "body.size: message"
            parts = [
                ".".join(str(p) for p in d.get("loc", ())) + ": " + str(d.get("msg", ""))
                for d in detail
                if isinstance(d, dict)
            ]
            return _printable("; ".join(parts))
    return _printable(response.text)


def is_retryable_status(status: int) -> bool:
    """The one rule for every served backend, HTTP reply or SDK error code alike: 408, 429 and every
    5xx except 501 are worth another try (on the next endpoint); 501 Not Implemented and other 4xx are
    answers about the request or the server that a retry cannot change.

    >>> [s for s in (400, 404, 408, 429, 500, 501, 502, 503, 504, 599) if is_retryable_status(s)]
    [408, 429, 500, 502, 503, 504, 599]
    """
    return status in (408, 429) or (500 <= status < 600 and status != 501)


def check_status(response: httpx.Response, *, name: str, detail: str, hint: str = "") -> None:
    """Classify one HTTP reply: below 400 passes; a retryable status raises :class:`RetryableError`
    (with the server's ``Retry-After``); any other error raises :class:`BackendError` naming the URL.
    ``detail`` (the server's own message) must already be scrubbed and bounded; ``hint`` says the fix.
    It is made printable here, whichever dialect read it (no control characters, no lone surrogates)."""
    status = response.status_code
    if status < 400:
        return
    detail = _printable(detail)
    if is_retryable_status(status):
        raise RetryableError(f"HTTP {status}: {detail}", parse_retry_after(response))
    message = f"{name}: HTTP {status} from {response.request.url}: {detail}"
    raise BackendError(f"{message.rstrip('.')}. {hint}" if hint else message)


class EndpointPool:
    """Round-robin over base URLs, skipping one that failed recently until its cooldown has passed, and
    one that has all its ``slots`` (calls in flight at most, per endpoint, from a pool file's
    ``slots=N``) taken. :meth:`pick` counts the call in flight there; :meth:`release` ends it.

    A URL's user-info (``http://user:password@host``) is taken out (:func:`split_credentials`): the
    pool's URLs are shown in errors, and ``credentials`` holds the ``Authorization`` value sent to each
    such endpoint instead of any other (as httpx does with credentials in a URL)."""

    def __init__(
        self,
        urls: list[str],
        *,
        cooldown: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        slots: Mapping[str, int] | None = None,
    ) -> None:
        if not urls:
            raise ConfigError(
                "An endpoint pool needs at least one URL: give the backend at least one endpoint URL."
            )
        split = [split_credentials(u.rstrip("/")) for u in urls]
        self.urls = [url for url, _ in split]
        self.credentials = {url: auth for url, auth in split if auth is not None}
        self.slots = {split_credentials(u.rstrip("/"))[0]: n for u, n in (slots or {}).items()}
        unknown = sorted(set(self.slots) - set(self.urls))
        if unknown or any(n < 1 for n in self.slots.values()):
            raise ConfigError(f"Endpoint slots {self.slots} must be >= 1 and name endpoints of the pool.")
        self.in_flight = dict.fromkeys(self.urls, 0)
        self.cooldown = cooldown
        self._clock = clock
        self._failed_at: dict[str, float] = {}
        self._next = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int | None:
        """Calls the pool takes at once when every endpoint has its slots: their sum; else None."""
        return sum(self.slots.values()) if len(self.slots) == len(self.urls) else None

    def pick(self) -> str:
        with self._lock:
            now = self._clock()
            order = [self.urls[(self._next + i) % len(self.urls)] for i in range(len(self.urls))]
            free = [u for u in order if u not in self.slots or self.in_flight[u] < self.slots[u]]
            healthy = [u for u in free if now - self._failed_at.get(u, -math.inf) >= self.cooldown]
            if healthy:
                url = healthy[0]
                self._next = (self.urls.index(url) + 1) % len(self.urls)
            else:  # every endpoint with a free slot failed recently: the one that failed longest ago
                url = min(free or self.urls, key=lambda u: self._failed_at.get(u, -math.inf))
            self.in_flight[url] += 1
            return url

    def release(self, url: str) -> None:
        with self._lock:
            self.in_flight[url] -= 1

    def mark_failed(self, url: str) -> None:
        with self._lock:
            self._failed_at[url] = self._clock()

    def mark_ok(self, url: str) -> None:
        with self._lock:
            self._failed_at.pop(url, None)


class RetryableError(Exception):
    """Raised inside a request function to ask for another try (on another endpoint)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def parse_retry_after(response: httpx.Response, cap: float = MAX_RETRY_AFTER) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), within ``0..cap``; None when absent or
    meaningless (``nan``, ``-inf``, garbage). ``inf`` and huge values become ``cap``."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    text = value.strip()[:64]
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
            seconds = when.timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return None
    if math.isnan(seconds) or seconds == -math.inf:
        return None
    return min(max(seconds, 0.0), cap)


class RemoteCaller:
    """Runs one logical call against a pool with retries, a concurrency limit and a total deadline.

    Every error it raises or logs goes through :func:`~interleave_thinker.backends.secrets.scrub`
    with the values of the client's auth headers and of ``secrets()`` (keys sent per request)."""

    def __init__(
        self,
        name: str,
        pool: EndpointPool,
        *,
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        headers: dict[str, str] | None = None,
        sleep: Callable[[float], None] = green.sleep,
        secrets: Callable[[], Iterable[str | None]] | None = None,
    ) -> None:
        self.name = name
        self.pool = pool
        self.retry = retry or RetrySettings()
        # Unbounded connection pool: the slots bound calls in flight, so httpx's default cap of 100
        # connections (20 kept alive) would only be a second, hidden limit under a larger concurrency.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        # Only the encodings whose decoded size the transport bounds (httpx adds br and zstd when
        # their packages are installed).
        self.client = GreenClient(
            timeout=self.retry.timeout,
            headers={"Accept-Encoding": "gzip, deflate", **(headers or {})},
            transport=GreenTransport(limits, max_reply_bytes=self.retry.max_reply_bytes),
            endpoint_auth=pool.credentials,
        )
        self.concurrency = min(concurrency, pool.capacity or concurrency)
        self._slots = green.Semaphore(self.concurrency)
        self._sleep = sleep
        self._header_secrets = header_secrets(headers) + credential_secrets(pool.credentials.values())
        self._secrets = secrets

    def resize(self, concurrency: int) -> None:
        """Allow ``concurrency`` calls in flight from now on (the batch scheduler sets its per-backend
        limit here, so one number bounds a backend end to end); calls already in flight finish in the
        slots they took. A pool whose endpoints all declare slots takes at most their sum."""
        if concurrency < 1:
            raise ConfigError(f"{self.name}: concurrency {concurrency} must be >= 1.")
        self.concurrency = min(concurrency, self.pool.capacity or concurrency)
        self._slots = green.Semaphore(self.concurrency)

    def secrets(self) -> list[str]:
        extra = [s for s in (self._secrets() if self._secrets else ()) if s]
        return [*self._header_secrets, *extra]

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets())

    def safe_cause(self, exc: BaseException | None) -> BaseException | None:
        """``exc`` to chain to, or a scrubbed stand-in when it (or its chain) would show a secret."""
        if exc is None or not leaks(exc, self.secrets()):
            return exc
        return BackendError(self.scrub(f"{type(exc).__name__}: {exc}"))

    def call(self, request: Callable[[httpx.Client, str, float], Any]) -> Any:
        """``request(client, base_url, timeout)`` returns a value, raises :class:`RetryableError` or
        :class:`BackendError`; transport errors and retryable statuses are retried on the next endpoint.
        When every try fails, the :class:`BackendError` is chained to the last underlying error."""
        try:
            return self._call(request)
        except BackendError as exc:
            message = self.scrub(str(exc))
            if message == str(exc) and not leaks(exc.__cause__, self.secrets()):
                raise
            raise BackendError(message) from self.safe_cause(exc.__cause__)

    def _call(self, request: Callable[[httpx.Client, str, float], Any]) -> Any:
        start = time.monotonic()
        deadline = self.retry.total_deadline
        with deadline_at(start + deadline):  # every read and write of the call stops there
            try:
                return self._tries(request, start, deadline)
            except ReplyRefused as exc:
                raise BackendError(f"{self.name}: {exc}") from None

    def _tries(
        self, request: Callable[[httpx.Client, str, float], Any], start: float, deadline: float
    ) -> Any:
        problems: list[str] = []
        last: BaseException | None = None
        for attempt in range(self.retry.max_retries + 1):
            left = deadline - (time.monotonic() - start)
            if left <= 0:
                break
            timeout = min(self.retry.timeout, left)
            url = ""
            retry_after: float | None = None
            try:
                with self._slots:  # a slot first, then the endpoint: chosen when the call can start
                    url = self.pool.pick()
                    try:
                        value = request(self.client, url, timeout)
                    finally:
                        self.pool.release(url)
                self.pool.mark_ok(url)
                return value
            except RetryableError as exc:
                problems.append(self.scrub(f"{url}: {exc}"))
                retry_after = exc.retry_after
                last = exc.__cause__ or exc
            except httpx.TimeoutException as exc:
                problems.append(f"{url}: timed out after {timeout:.3g}s")
                last = exc
            except httpx.TransportError as exc:
                problems.append(self.scrub(f"{url}: {type(exc).__name__}: {exc}"))
                last = exc
            self.pool.mark_failed(url)
            if attempt < self.retry.max_retries:
                delay = self.retry.delay(attempt, retry_after)
                delay = min(delay, max(0.0, deadline - (time.monotonic() - start)))
                # A warning, so a dead server is not minutes of silence: each retry says why and how long.
                logger.warning(
                    "%s: %s; retry %d/%d in %.1f s",
                    self.name,
                    problems[-1],
                    attempt + 1,
                    self.retry.max_retries,
                    delay,
                )
                self._sleep(delay)
        over = time.monotonic() - start >= deadline
        reason = f"deadline of {deadline:.3g}s passed" if over else f"{len(problems)} tries failed"
        raise BackendError(
            f"{self.name}: {reason}; last error: {problems[-1] if problems else 'none'}"
        ) from self.safe_cause(last)

    def check_status(self, response: httpx.Response, detail: str | None = None, hint: str = "") -> None:
        """:func:`check_status` with this caller's name; ``detail`` (default: the body's start) is
        scrubbed of secrets first and then cut, so no prefix of a key survives."""
        text = self.scrub(response.text if detail is None else detail)
        check_status(response, name=self.name, detail=text[:500] or "(empty body)", hint=hint)

    def close(self) -> None:
        self.client.close()
