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


def image_header(data: bytes, max_pixels: int) -> tuple[str, int, int]:
    """Format, width and height of encoded image bytes from the header alone (no pixel is decoded).

    Why here: every reader of an image it did not make (a file from a folder, a reply from a server)
    must refuse a non-image, a decompression bomb or an over-large picture before decoding it; this is
    the one check they share. ``ValueError`` says which, in a phrase the caller prefixes with the source.
    """
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                kind, (width, height) = str(image.format or "unknown"), image.size
    except Image.DecompressionBombError:
        raise ValueError("is a decompression bomb (its header declares too many pixels)") from None
    except (OSError, SyntaxError, ValueError) as exc:  # UnidentifiedImageError is an OSError
        raise ValueError(f"is not a readable image ({type(exc).__name__})") from None
    if width < 1 or height < 1 or width * height > max_pixels:
        raise ValueError(f"is {width}x{height} pixels, over the limit of {max_pixels}")
    return kind, width, height


def open_bounded(data: bytes, max_pixels: int) -> Image.Image:
    """The decoded image of ``data`` after :func:`image_header` passed (``ValueError`` otherwise)."""
    import warnings

    image_header(data, max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                image.load()
                return image.copy()
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"cannot be decoded ({type(exc).__name__}: {str(exc)[:120]})") from None
