"""Small image helpers shared across layers."""

from __future__ import annotations

import io
from typing import cast

from PIL import Image


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def is_white_canvas(image: Image.Image) -> bool:
    """True for a pure white picture, the release's "before" of a text-to-image step."""
    extrema = cast(tuple[tuple[int, int], ...], image.convert("RGB").getextrema())
    return all(low == 255 for low, _ in extrema)


def open_rgb(path: str) -> Image.Image:
    with Image.open(path) as handle:
        return handle.convert("RGB")
