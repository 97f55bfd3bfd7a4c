"""What every served backend shares: an endpoint pool, retries with backoff and jitter, deadlines,
a concurrency limit, and the translation of transport failures into :class:`BackendError`.

Backends stay synchronous (one ``chat`` / ``generate`` method); the batch scheduler runs them in
worker threads, so one thread-safe ``httpx.Client`` per backend is all the transport we need.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.core.config import RemoteOptions

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetrySettings:
    """How hard a served backend tries before giving up."""

    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    jitter: float = 0.5
    timeout: float = 300.0
    deadline: float | None = None

    @classmethod
    def from_options(cls, options: RemoteOptions) -> RetrySettings:
        """The retry half of the user's ``remote`` config section."""
        return cls(
            max_retries=options.max_retries,
            backoff_base=options.backoff_base,
            backoff_max=options.backoff_max,
            timeout=options.timeout,
            deadline=options.deadline,
        )

    def delay(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Exponential backoff with multiplicative jitter; a server's ``Retry-After`` is a lower bound."""
        base = min(self.backoff_max, self.backoff_base * (2**retry))
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        return max(base * spread, retry_after or 0.0)


class EndpointPool:
    """Round-robin over base URLs, skipping one that failed recently until its cooldown has passed."""

    def __init__(
        self, urls: list[str], *, cooldown: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not urls:
            raise ConfigError("An endpoint pool needs at least one URL.")
        self.urls = [u.rstrip("/") for u in urls]
        self.cooldown = cooldown
        self._clock = clock
        self._failed_at: dict[str, float] = {}
        self._next = 0
        self._lock = threading.Lock()

    def pick(self) -> str:
        with self._lock:
            now = self._clock()
            for offset in range(len(self.urls)):
                url = self.urls[(self._next + offset) % len(self.urls)]
                failed = self._failed_at.get(url)
                if failed is None or now - failed >= self.cooldown:
                    self._next = (self._next + offset + 1) % len(self.urls)
                    return url
            # Everything failed recently: try the one that failed longest ago.
            return min(self.urls, key=lambda u: self._failed_at[u])

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


def parse_retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class RemoteCaller:
    """Runs one logical call against a pool with retries, a concurrency limit and a total deadline."""

    def __init__(
        self,
        name: str,
        pool: EndpointPool,
        *,
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        headers: dict[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self.pool = pool
        self.retry = retry or RetrySettings()
        self.client = httpx.Client(timeout=self.retry.timeout, headers=headers or {})
        self._slots = threading.BoundedSemaphore(concurrency)
        self._sleep = sleep

    def call(self, request: Callable[[httpx.Client, str, float], Any]) -> Any:
        """``request(client, base_url, timeout)`` returns a value, raises :class:`RetryableError` or
        :class:`BackendError`; transport errors and retryable statuses are retried on the next endpoint.
        When every try fails, the :class:`BackendError` is chained to the last underlying error."""
        start = time.monotonic()
        problems: list[str] = []
        last: BaseException | None = None
        for attempt in range(self.retry.max_retries + 1):
            timeout = self.retry.timeout
            if self.retry.deadline is not None:
                left = self.retry.deadline - (time.monotonic() - start)
                if left <= 0:
                    break
                timeout = min(timeout, left)
            url = self.pool.pick()
            retry_after: float | None = None
            try:
                with self._slots:
                    value = request(self.client, url, timeout)
                self.pool.mark_ok(url)
                return value
            except RetryableError as exc:
                problems.append(f"{url}: {exc}")
                retry_after = exc.retry_after
                last = exc.__cause__ or exc
            except httpx.TimeoutException as exc:
                problems.append(f"{url}: timed out after {timeout:.3g}s")
                last = exc
            except httpx.TransportError as exc:
                problems.append(f"{url}: {type(exc).__name__}: {exc}")
                last = exc
            self.pool.mark_failed(url)
            if attempt < self.retry.max_retries:
                delay = self.retry.delay(attempt, retry_after)
                if self.retry.deadline is not None:
                    delay = min(delay, max(0.0, self.retry.deadline - (time.monotonic() - start)))
                logger.info("%s: retrying in %.2fs after: %s", self.name, delay, problems[-1])
                self._sleep(delay)
        over = self.retry.deadline is not None and time.monotonic() - start >= self.retry.deadline
        reason = f"deadline of {self.retry.deadline:.3g}s passed" if over else f"{len(problems)} tries failed"
        raise BackendError(
            f"{self.name}: {reason}; last error: {problems[-1] if problems else 'none'}"
        ) from last

    def check_status(self, response: httpx.Response) -> None:
        """Retryable statuses raise :class:`RetryableError`; other errors raise :class:`BackendError`."""
        if response.status_code in RETRYABLE_STATUS:
            raise RetryableError(
                f"HTTP {response.status_code}: {response.text[:200]}", parse_retry_after(response)
            )
        if response.status_code >= 400:
            raise BackendError(
                f"{self.name}: HTTP {response.status_code} from {response.url}: {response.text[:300]}"
            )

    def close(self) -> None:
        self.client.close()
