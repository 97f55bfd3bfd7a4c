"""Keeps a run's trace and images, and (when given a folder) writes them as they are produced.

Writing each image and the trace right after every attempt means a crash loses at most the call in
flight; every file is written atomically, so no reader ever sees half a file. Where the files go and
how the trace is serialised is the run folder's layout (``core/run_folder.py``).

A run with a folder keeps its images as the PNG bytes it wrote, not decoded: a 1024² image is 3 MB of
pixels and every attempt of a request in flight used to stay decoded until the request ended (a batch
of 16 such requests held ~450 MB). An image is decoded again only when asked for, except the one
added last, which the loop goes on with.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from PIL import Image

from interleave_thinker.backends.encoding import png_bytes as encoded_png
from interleave_thinker.core.images import png_bytes
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import image_path, trace_json, trace_path
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.file_writes import off_loop

_KEPT_MODES = ("RGB", "RGBA", "L")


def file_bytes(image: Image.Image) -> bytes:
    """The bytes of an image file: PIL's PNG at its default level, the mode kept (the PNG encoder of
    ``backends.encoding`` makes the same bytes, and remembers them for the backends that send the image),
    or a served generator's reply as it came when that was a plain RGB PNG (``encoding.decode_image``)."""
    return encoded_png(image, keep_mode=True) if image.mode in _KEPT_MODES else png_bytes(image)


def _write_png(path: Path, image: Image.Image) -> bytes:
    data = file_bytes(image)
    write_atomic(path, data)
    return data


class ImageShelf(MutableMapping[str, Image.Image]):
    """Image name -> image; an image set as PNG bytes (:meth:`put_png`) is decoded when read, and each
    read gives a new copy, except for the image added last, which is returned as it was added."""

    def __init__(self) -> None:
        self._items: dict[str, Image.Image | bytes] = {}
        self._last: tuple[str, Image.Image] | None = None

    def put_png(self, name: str, image: Image.Image, data: bytes) -> None:
        """Keep ``image`` as ``data`` (its PNG bytes); it stays decoded until another one is added."""
        self._items[name] = data
        self._last = (name, image)

    def __getitem__(self, name: str) -> Image.Image:
        value = self._items[name]
        if not isinstance(value, bytes):
            return value
        if self._last is not None and self._last[0] == name:
            return self._last[1]
        with Image.open(io.BytesIO(value)) as opened:
            opened.load()
            return opened.copy()

    def __setitem__(self, name: str, image: Image.Image) -> None:
        self._items[name] = image
        if self._last is not None and self._last[0] == name:
            self._last = None

    def __delitem__(self, name: str) -> None:
        del self._items[name]
        if self._last is not None and self._last[0] == name:
            self._last = None

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def encoded(self, name: str) -> bytes:
        """The image's file bytes, encoded only when it was not kept as such."""
        value = self._items[name]
        return value if isinstance(value, bytes) else file_bytes(value)


class RunRecorder:
    def __init__(self, trace: Trace, out_dir: Path | None = None) -> None:
        self.trace = trace
        self.images: MutableMapping[str, Image.Image] = ImageShelf() if out_dir is not None else {}
        self.out_dir = out_dir

    def add_image(self, name: str, image: Image.Image) -> str:
        if self.out_dir is None:
            self.images[name] = image
            return name
        path = image_path(self.out_dir, name)
        data = off_loop(lambda: _write_png(path, image))
        if isinstance(self.images, ImageShelf):
            self.images.put_png(name, image, data)
        else:  # a caller replaced the mapping
            self.images[name] = image
        return name

    def checkpoint(self) -> None:
        if self.out_dir is not None:
            out_dir = self.out_dir
            off_loop(lambda: write_atomic(trace_path(out_dir), trace_json(self.trace)))

    def save(self, out_dir: Path) -> None:
        """Write the trace and every image into ``out_dir`` (used by ``Result.save``)."""
        for name in self.images:
            data = self.images.encoded(name) if isinstance(self.images, ImageShelf) else None
            write_atomic(image_path(out_dir, name), data or png_bytes(self.images[name]))
        write_atomic(trace_path(out_dir), trace_json(self.trace))
