"""What every served generator shares on top of :class:`RemoteBackend`: batches run in parallel up to
the backend's concurrency (the server or the pool batches them), results in order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest
from interleave_thinker.backends.remote_backend import RemoteBackend

if TYPE_CHECKING:
    from PIL import Image


class PooledImageBackend(RemoteBackend, ImageBatchMixin):
    """Subclasses set ``concurrency``, call :meth:`open_caller` and implement ``generate``."""

    concurrency: int = 8

    def generate_batch(self, requests: list[ImageRequest]) -> list[Image.Image]:
        """Requests run in parallel up to ``concurrency``, spread over the pool; results keep their order."""
        if len(requests) <= 1:
            return [self.generate(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as executor:
            return list(executor.map(self.generate, requests))
