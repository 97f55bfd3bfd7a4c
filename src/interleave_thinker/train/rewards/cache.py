"""A content-addressed cache of generated images, shared by concurrent reward calls.

GRPO scores 8 rollouts per prompt and many rollouts refine to the same prompt, so identical
(prompt, before image, seed, size) generations are computed once: concurrent requests for a key
wait for the one in flight. An optional folder keeps results across steps and runs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path

from PIL import Image

from interleave_thinker.core.images import png_bytes
from interleave_thinker.core.paths import write_atomic


def image_digest(image: Image.Image | None) -> str:
    if image is None:
        return "none"
    return hashlib.sha256(f"{image.mode}{image.size}".encode() + image.tobytes()).hexdigest()


def generation_key(prompt: str, before: Image.Image | None, seed: int, size: tuple[int, int]) -> str:
    payload = f"{prompt}\0{image_digest(before)}\0{seed}\0{size[0]}x{size[1]}"
    return hashlib.sha256(payload.encode()).hexdigest()


class GenerationCache:
    """Futures of generated images by key: a finished one, one in flight, or a new one started once."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._futures: dict[str, Future[Image.Image]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_start(
        self, key: str, compute: Callable[[], Image.Image], executor: Executor
    ) -> tuple[Future[Image.Image], bool]:
        """The future for ``key`` and whether it was already known (cached, on disk, or in flight).

        A new computation runs on ``executor`` and is written to the folder before its future resolves.
        """
        with self._lock:
            known = self._futures.get(key)
            if known is not None:
                self.hits += 1
                return known, True
            disk = self._load(key)
            if disk is not None:
                done: Future[Image.Image] = Future()
                done.set_result(disk)
                self._futures[key] = done
                self.hits += 1
                return done, True
            self.misses += 1
            future = executor.submit(self._compute, key, compute)
            self._futures[key] = future
        return future, False

    def _compute(self, key: str, compute: Callable[[], Image.Image]) -> Image.Image:
        try:
            image = compute()
        except BaseException:
            with self._lock:  # failures are not cached: a later call tries again
                self._futures.pop(key, None)
            raise
        self._store(key, image)
        return image

    def _load(self, key: str) -> Image.Image | None:
        if self.folder is None:
            return None
        path = self.folder / f"{key}.png"
        if not path.is_file():
            return None
        with Image.open(path) as handle:
            return handle.convert("RGB")

    def _store(self, key: str, image: Image.Image) -> None:
        if self.folder is not None:
            write_atomic(self.folder / f"{key}.png", png_bytes(image))
