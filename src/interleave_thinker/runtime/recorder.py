"""Keeps a run's trace and images, and (when given a folder) writes them as they are produced.

Writing each image and the trace right after every attempt means a crash loses at most the call in
flight; every file is written atomically, so no reader ever sees half a file. Where the files go and
how the trace is serialised is the run folder's layout (``core/run_folder.py``).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from interleave_thinker.core.images import png_bytes
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import image_path, trace_json, trace_path
from interleave_thinker.core.types import Trace


class RunRecorder:
    def __init__(self, trace: Trace, out_dir: Path | None = None) -> None:
        self.trace = trace
        self.images: dict[str, Image.Image] = {}
        self.out_dir = out_dir

    def add_image(self, name: str, image: Image.Image) -> str:
        self.images[name] = image
        if self.out_dir is not None:
            write_atomic(image_path(self.out_dir, name), png_bytes(image))
        return name

    def checkpoint(self) -> None:
        if self.out_dir is not None:
            write_atomic(trace_path(self.out_dir), trace_json(self.trace))

    def save(self, out_dir: Path) -> None:
        """Write the trace and every image into ``out_dir`` (used by ``Result.save``)."""
        for name, image in self.images.items():
            write_atomic(image_path(out_dir, name), png_bytes(image))
        write_atomic(trace_path(out_dir), trace_json(self.trace))
