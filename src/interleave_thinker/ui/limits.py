"""What one visitor may send: the request's length and each upload's count, bytes and pixels.

Checked where the request enters, before anything is decoded or queued: a 15 KB PNG can declare
121 megapixels (1.5 GB and half a minute to decode), and a 1 MB request keeps a planner busy for
minutes. The pixels are read from the image header only (Pillow's ``Image.open`` parses the header and
decodes nothing), so a refusal costs a few kilobytes of reading whatever the file declares.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from interleave_thinker.core.errors import InputError

UPLOAD_FIELD = "the Input images field"
"""How messages name where the images came from (the CLI names its ``--image`` flag instead)."""


def check_prompt(text: str, max_chars: int) -> None:
    """Refuse a request longer than ``max_chars`` characters (at most 4 bytes each in UTF-8)."""
    if len(text) > max_chars:
        raise InputError(
            f"The request is {len(text):,} characters long; this demo takes at most {max_chars:,}. "
            "Shorten it."
        )


def header_pixels(path: Path) -> tuple[int, int] | None:
    """Width and height as the header declares them; ``None`` when even Pillow's own bomb limit is
    passed (it refuses such a header itself) or when the file is no image (the run's reader says so)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                return image.size
    except Image.DecompressionBombError:
        return None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return (0, 0)


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
        dims = header_pixels(path)
        if dims is None or dims[0] * dims[1] > max_pixels:
            what = "more pixels than Pillow opens" if dims is None else f"{dims[0]}x{dims[1]} pixels"
            raise InputError(
                f"Upload {path.name} is {what}; the limit is {max_pixels / 1e6:.3g} megapixels "
                f"({max_pixels:,} pixels) per image. Send a smaller image."
            )
    return paths
