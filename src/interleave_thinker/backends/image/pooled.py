"""What every generator served over a :class:`~interleave_thinker.backends.remote.RemoteCaller` shares:
batches in parallel up to the backend's concurrency, ``close`` and use as a context manager."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Self

from interleave_thinker.backends.protocols import ImageBatchMixin

if TYPE_CHECKING:
    from PIL import Image

    from interleave_thinker.backends.remote import RemoteCaller


class PooledImageBackend(ImageBatchMixin):
    """Subclasses set ``caller`` and ``concurrency`` and implement ``generate``."""

    caller: RemoteCaller
    concurrency: int

    def generate_batch(self, requests: list[dict[str, Any]]) -> list[Image.Image]:
        """Requests run in parallel up to ``concurrency``, spread over the pool; results keep their order."""
        if len(requests) <= 1:
            return [self.generate(**r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as executor:
            return list(executor.map(lambda r: self.generate(**r), requests))

    def close(self) -> None:
        self.caller.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
