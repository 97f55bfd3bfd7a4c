"""Small image helpers shared across layers."""

from __future__ import annotations

import io
from os import PathLike
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


MAX_IMAGE_PIXELS = 4096 * 4096
"""The default bound on an image someone else made (a file read as data, a server's reply, an upload, a
request to our servers): width x height from its header, about 50 MB of RGB once decoded."""


class ImageRefused(ValueError):
    """An image refused from its header: ``kind`` is ``not_an_image`` or ``too_large``; the message is a
    phrase the caller prefixes with the image's source."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def image_header(source: bytes | str | PathLike[str], max_pixels: int) -> tuple[str, int, int]:
    """Format, width and height of an encoded image (bytes or a file) from its header alone.

    Why here: every reader of an image it did not make (a file from a folder, a reply from a server, an
    upload) must refuse a non-image, a decompression bomb or an over-large picture before a pixel is
    decoded; this is the one check they share. :class:`ImageRefused` (a ``ValueError``) says which.
    """
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
                kind, (width, height) = str(image.format or "unknown"), image.size
    except Image.DecompressionBombError:
        raise ImageRefused(
            "is a decompression bomb (its header declares too many pixels)", "too_large"
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:  # UnidentifiedImageError is an OSError
        raise ImageRefused(f"is not a readable image ({type(exc).__name__})", "not_an_image") from None
    if width < 1 or height < 1 or width * height > max_pixels:
        raise ImageRefused(
            f"is {width}x{height} = {width * height} pixels, over the limit of {max_pixels}", "too_large"
        )
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
