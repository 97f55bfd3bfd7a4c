"""Keeps a run's trace and images, and (when given a folder) writes them as they are produced.

Writing each image and the trace right after every attempt means a crash loses at most the call in
flight; every file is written atomically, so no reader ever sees half a file.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from interleave_thinker.core.images import png_bytes
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.types import Trace

IMAGES_DIR = "images"
TRACE_FILE = "trace.json"


class RunRecorder:
    def __init__(self, trace: Trace, out_dir: Path | None = None) -> None:
        self.trace = trace
        self.images: dict[str, Image.Image] = {}
        self.out_dir = out_dir

    def add_image(self, name: str, image: Image.Image) -> str:
        self.images[name] = image
        if self.out_dir is not None:
            write_atomic(self.out_dir / IMAGES_DIR / name, png_bytes(image))
        return name

    def checkpoint(self) -> None:
        if self.out_dir is not None:
            write_atomic(self.out_dir / TRACE_FILE, self.trace.model_dump_json(indent=2))

    def save(self, out_dir: Path) -> None:
        """Write the trace and every image into ``out_dir`` (used by ``Result.save``)."""
        for name, image in self.images.items():
            write_atomic(out_dir / IMAGES_DIR / name, png_bytes(image))
        write_atomic(out_dir / TRACE_FILE, self.trace.model_dump_json(indent=2))
