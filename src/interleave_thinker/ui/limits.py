"""What one visitor may send: the request's length and each upload's count, bytes and pixels.

Checked where the request enters, before anything is decoded or queued: a 15 KB PNG can declare
121 megapixels (1.5 GB and half a minute to decode), and a 1 MB request keeps a planner busy for
minutes. The pixels are read from the image header only (Pillow's ``Image.open`` parses the header and
decodes nothing), so a refusal costs a few kilobytes of reading whatever the file declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.images import ImageRefused, image_header

UPLOAD_FIELD = "the Input images field"
"""How messages name where the images came from (the CLI names its ``--image`` flag instead)."""


def check_prompt(text: str, max_chars: int) -> None:
    """Refuse a request longer than ``max_chars`` characters (at most 4 bytes each in UTF-8)."""
    if len(text) > max_chars:
        raise InputError(
            f"The request is {len(text):,} characters long; this demo takes at most {max_chars:,}. "
            "Shorten it."
        )


def check_uploads(
    files: Sequence[str] | None, *, max_bytes: int, max_images: int, max_pixels: int
) -> list[str]:
    """The uploaded paths, refused with one line when too many, too large in bytes or in pixels."""
    paths = [str(f) for f in files or []]
    if len(paths) > max_images:
        raise InputError(f"{len(paths)} images were uploaded; this demo takes at most {max_images}.")
    for path in map(Path, paths):
        size = path.stat().st_size if path.is_file() else 0
        if size > max_bytes:
            raise InputError(
                f"Upload {path.name} is {size / 2**20:.3g} MB; the limit is "
                f"{max_bytes / 2**20:.3g} MB per image. Send a smaller image."
            )
        if size == 0:
            continue  # missing or empty: the run's reader names it
        try:
            image_header(path, max_pixels)
        except ImageRefused as exc:
            if exc.kind == "too_large":
                raise InputError(
                    f"Upload {path.name} {exc}. Send a smaller image (at most {max_pixels / 1e6:.3g} "
                    "megapixels per image)."
                ) from None
            # not an image: the run's reader names it
    return paths
