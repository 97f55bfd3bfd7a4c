"""PNG and base64 encoding of images for every backend that sends or receives them over a wire.

Why one module: seven copies had grown small differences (mode handling, compression level, which
decode errors were caught, whether a bomb-sized reply was refused). PNG is lossless, so a served model
sees exactly the pixels a local one would.
"""

from __future__ import annotations

import base64
import binascii
import io

from PIL import Image

MAX_REPLY_CHARS = 256 * 1024 * 1024
"""A base64 image longer than this is refused before decoding (a 4096² PNG is far below it)."""

_DECODE_ERRORS = (binascii.Error, Image.DecompressionBombError, OSError, ValueError, SyntaxError)


def png_bytes(image: Image.Image, *, keep_mode: bool = False, compress_level: int = 6) -> bytes:
    """``image`` as PNG bytes, in RGB; ``keep_mode`` keeps RGBA and L as they are. ``compress_level=1``
    halves the CPU of PIL's default level for ~15 % more bytes (uploads of large images)."""
    if not (keep_mode and image.mode in ("RGB", "RGBA", "L")):
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=compress_level)
    return buffer.getvalue()


def png_base64(image: Image.Image, *, keep_mode: bool = False) -> str:
    """``image`` as base64 PNG text (JSON bodies)."""
    return base64.b64encode(png_bytes(image, keep_mode=keep_mode)).decode("ascii")


def png_data_url(image: Image.Image) -> str:
    """``image`` as a ``data:image/png;base64,...`` URL, as OpenAI-compatible servers accept."""
    return "data:image/png;base64," + png_base64(image)


def decode_image(raw: bytes) -> Image.Image:
    """PNG/JPEG/WebP bytes -> a loaded RGB image; ``ValueError`` naming the cause when they are not one."""
    try:
        with Image.open(io.BytesIO(raw)) as opened:
            opened.load()
            return opened.convert("RGB")
    except _DECODE_ERRORS as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc


def decode_base64_image(data: str, max_chars: int = MAX_REPLY_CHARS) -> Image.Image:
    """Base64 text of an image -> a loaded RGB image; ``ValueError`` when too long, not base64 or not
    an image."""
    if len(data) > max_chars:
        raise ValueError(f"{len(data)} base64 characters, over the limit of {max_chars}")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return decode_image(raw)
