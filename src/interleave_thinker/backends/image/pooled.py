"""What every served generator shares on top of :class:`RemoteBackend`: batches run in parallel up to
the backend's concurrency (the server or the pool batches them), results in order; a returned image is
decoded within the same bounds and named the same way in its errors (:meth:`reply_image`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypedDict

from interleave_thinker.backends.encoding import ImageTooLarge, decode_base64_image, decode_image
from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.remote_backend import RemoteBackend
from interleave_thinker.core.errors import BackendError

if TYPE_CHECKING:
    from PIL import Image


class PoolKeywords(TypedDict, total=False):
    """The transport keywords every pooled generator's constructor takes (``pool_settings`` builds them
    from the user's ``remote`` section), declared once here."""

    retry: RetrySettings | None
    concurrency: int
    cooldown: float
    api_key: str | None
    """The bearer token sent to every endpoint (none: no Authorization header)."""
    key_env: str
    """The variable the key came from: its value is scrubbed from every error."""
    slots: dict[str, int]
    """Calls in flight at most per endpoint (a pool file's ``slots=N``); when every endpoint has them,
    their sum is the backend's capacity."""


def endpoint_list(urls: str | Sequence[str], normalize: Callable[[str], str]) -> list[str]:
    """One URL or several, each normalised."""
    return [normalize(u) for u in ([urls] if isinstance(urls, str) else urls)]


class PooledImageBackend(RemoteBackend, ImageBatchMixin):
    """Subclasses set ``urls`` and ``name``, call :meth:`open_pool` and implement ``generate``."""

    urls: list[str]

    def open_pool(self, default_key_env: str, transport: PoolKeywords) -> None:
        """The endpoint pool over ``self.urls`` with the bearer token, retries and concurrency given."""
        self.concurrency = transport.get("concurrency", 8)
        self.key_envs = (transport.get("key_env", default_key_env),)
        api_key = transport.get("api_key")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.open_caller(
            self.urls,
            retry=transport.get("retry"),
            concurrency=self.concurrency,
            cooldown=transport.get("cooldown", 30.0),
            headers=headers,
            slots=transport.get("slots"),
        )
        self.concurrency = self.caller.concurrency  # at most the pool's declared slots

    def generate_batch(self, requests: list[ImageRequest]) -> list[Image.Image]:
        """Requests run in parallel up to ``concurrency``, spread over the pool; results keep their order."""
        if len(requests) <= 1:
            return [self.generate(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as executor:
            return list(executor.map(self.generate, requests))

    def reply_image(self, data: bytes | str, what: str, asked: tuple[int, int] | None = None) -> Image.Image:
        """A returned image (its bytes, or base64 text), decoded within ``remote.max_image_pixels`` and,
        from a server that honours the size (width, height) it is ``asked`` for, within
        ``encoding.reply_bound`` of it; one over a bound or not an image is a :class:`BackendError`
        naming ``what`` (where it came from)."""
        max_pixels = self.caller.retry.max_image_pixels
        try:
            if isinstance(data, str):
                return decode_base64_image(data, max_pixels=max_pixels, asked=asked)
            return decode_image(data, max_pixels=max_pixels, asked=asked)
        except ImageTooLarge as exc:
            raise BackendError(f"{self.name}: {what}: {exc}.") from None
        except ValueError as exc:
            raise BackendError(f"{self.name}: {what} is not an image: {exc}") from exc
