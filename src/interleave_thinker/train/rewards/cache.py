"""A content-addressed cache of generated images, shared by concurrent reward calls.

GRPO scores 8 rollouts per prompt and many rollouts refine to the same prompt, so identical
(prompt, before image, seed, size) generations are computed once: concurrent requests for a key
wait for the one in flight. An optional folder keeps results across steps and runs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
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
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._done: dict[str, Image.Image] = {}
        self._pending: dict[str, Future[Image.Image]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_compute(self, key: str, compute: Callable[[], Image.Image]) -> tuple[Image.Image, bool]:
        """The image for ``key`` and whether it came from the cache (or an identical call in flight)."""
        with self._lock:
            if key in self._done:
                self.hits += 1
                return self._done[key], True
            pending = self._pending.get(key)
            if pending is None:
                disk = self._load(key)
                if disk is not None:
                    self._done[key] = disk
                    self.hits += 1
                    return disk, True
                pending = Future()
                self._pending[key] = pending
                owner = True
                self.misses += 1
            else:
                owner = False
                self.hits += 1
        if not owner:
            return pending.result(), True
        try:
            image = compute()
        except BaseException as exc:
            with self._lock:
                self._pending.pop(key, None)
            pending.set_exception(exc)
            raise
        with self._lock:
            self._done[key] = image
            self._pending.pop(key, None)
        self._store(key, image)
        pending.set_result(image)
        return image, False

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
