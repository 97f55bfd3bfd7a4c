"""PNG and base64 encoding of images for every backend that sends or receives them over a wire.

Why one module: seven copies had grown small differences (mode handling, compression level, which
decode errors were caught, whether a bomb-sized reply was refused). PNG is lossless, so a served model
sees exactly the pixels a local one would.
"""

from __future__ import annotations

import base64
import binascii
import io
import threading
import warnings
import weakref

from PIL import Image

from interleave_thinker.backends.bounds import MAX_IMAGE_PIXELS
from interleave_thinker.core import green

MAX_REPLY_CHARS = 256 * 1024 * 1024
"""A base64 image longer than this is refused before decoding (a 4096² PNG is far below it)."""


class ImageTooLarge(ValueError):
    """A reply image whose header declares more pixels than allowed (a decompression bomb: a 17 KB PNG
    can declare 12000², 432 MB once decoded); raised before its pixels are decoded."""


_DECODE_ERRORS = (binascii.Error, Image.DecompressionBombError, OSError, ValueError, SyntaxError)


class _Encoded:
    """The PNG encodings of the images that are alive, keyed by the image object itself.

    Why: one image is encoded again and again: the shared white canvas is the critic's "before" of every
    text-to-image attempt (21 ms of CPU at 1024² each time), a generated image is written to disk, sent
    to the critic as "after", then as the next step's "before" and edit input. An image is immutable
    once made everywhere in this project (the canvas is shared, inputs are copied, replies are fresh),
    which is what lets an encoding be reused; an entry goes when its image is garbage-collected.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Image.Image], dict[tuple[bool, int], bytes]]] = {}
        self._lock = threading.RLock()  # a collection inside ``get`` may run ``_drop`` on this thread

    def get(self, image: Image.Image, key: tuple[bool, int]) -> bytes | None:
        """The bytes kept for ``key`` = (mode kept, level), or for the same mode at a higher level: those
        are the same pixels, smaller and already paid for (an upload asks for level 1 to save CPU, and
        the image was usually written to ``images/`` at level 6 just before). Never a lower level, so a
        written file keeps PIL's default encoding whatever was sent first."""
        with self._lock:
            entry = self._entries.get(id(image))
            if entry is None or entry[0]() is not image:
                return None
            kept, level = key
            usable = [(lv, data) for (k, lv), data in entry[1].items() if k == kept and lv >= level]
            return max(usable, key=lambda item: item[0])[1] if usable else None

    def put(self, image: Image.Image, key: tuple[bool, int], data: bytes) -> None:
        ident = id(image)
        with self._lock:
            entry = self._entries.get(ident)
            if entry is None or entry[0]() is not image:
                entry = (weakref.ref(image, lambda _, i=ident: self._drop(i)), {})  # type: ignore[misc]
                self._entries[ident] = entry
            entry[1][key] = data

    def _drop(self, ident: int) -> None:
        with self._lock:
            entry = self._entries.get(ident)
            if entry is not None and entry[0]() is None:
                del self._entries[ident]


_ENCODED = _Encoded()


def png_bytes(image: Image.Image, *, keep_mode: bool = False, compress_level: int = 6) -> bytes:
    """``image`` as PNG bytes, in RGB; ``keep_mode`` keeps RGBA and L as they are. ``compress_level=1``
    halves the CPU of PIL's default level for ~15 % more bytes (uploads of large images). An image
    encoded before with the same settings is not encoded again (see :class:`_Encoded`), so an image
    must not be changed in place once sent or written (draw on a ``copy()``)."""
    key = (keep_mode and image.mode != "RGB", compress_level)  # an RGB image's bytes are the same either way
    cached = _ENCODED.get(image, key)
    if cached is not None:
        return cached
    source = image
    if not (keep_mode and image.mode in ("RGB", "RGBA", "L")):
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=compress_level)
    data = buffer.getvalue()
    _ENCODED.put(source, key, data)
    return data


def png_base64(image: Image.Image, *, keep_mode: bool = False) -> str:
    """``image`` as base64 PNG text (JSON bodies)."""
    return base64.b64encode(png_bytes(image, keep_mode=keep_mode)).decode("ascii")


def png_data_url(image: Image.Image) -> str:
    """``image`` as a ``data:image/png;base64,...`` URL, as OpenAI-compatible servers accept."""
    return "data:image/png;base64," + png_base64(image)


OFF_LOOP_PIXELS = 256 * 256
"""A PNG reply of at least this many pixels (other formats: :data:`OFF_LOOP_BYTES`) is decoded in a
codec thread when it arrives inside a batch request's greenlet: decoding a 1024² PNG takes ~20 ms of
CPU (PIL lets go of the interpreter lock meanwhile), which on the loop thread would hold up every
other request in flight. Smaller ones cost less than the hop to a thread."""
OFF_LOOP_BYTES = 64 * 1024
CODEC_THREADS = 2
_codecs = green.lazy_pool(CODEC_THREADS, "image-codec")


Asked = tuple[int, int] | None
"""The width and height a served generator was asked for, when it honours the size it is sent."""


def reply_bound(asked: tuple[int, int]) -> int:
    """The most pixels a served reply to a ``width`` x ``height`` request may have: each side at most
    twice the one asked for, plus 64 (for servers that round sizes up). A server that sends far more is
    refused before the pixels are decoded, so a batch's memory follows the sizes it asks for."""
    width, height = asked
    return (2 * width + 64) * (2 * height + 64)


def decode_image(raw: bytes, max_pixels: int = MAX_IMAGE_PIXELS, asked: Asked = None) -> Image.Image:
    """PNG/JPEG/WebP bytes -> a loaded RGB image; ``ValueError`` naming the cause when they are not one,
    :class:`ImageTooLarge` when the header declares more than ``max_pixels`` (nothing decoded then).

    A reply that is a plain RGB PNG (:func:`plain_rgb_png`) is kept as the image's encoding, so writing
    it to ``images/``, sending it to the critic and uploading it for the next edit encode nothing: at
    1024² one PNG encode is 0.1-0.3 s of CPU, more than everything else a batch does per call. A
    large reply is decoded off the batch's loop (:data:`OFF_LOOP_PIXELS`). With ``asked``, the image is
    also held to :func:`reply_bound` of that size (:class:`ImageTooLarge` naming it)."""
    if _worth_a_thread(raw[:24], len(raw)):
        return green.call_blocking(_codecs, lambda: _decode(raw, max_pixels, asked))
    return _decode(raw, max_pixels, asked)


def _worth_a_thread(head: bytes, size: int) -> bool:
    """From a reply's first 24 bytes (a PNG's IHDR gives its width and height) and its length."""
    if head.startswith(_PNG_SIGNATURE) and len(head) == 24 and head[12:16] == b"IHDR":
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        return width * height >= OFF_LOOP_PIXELS
    return size >= OFF_LOOP_BYTES


def _decode(raw: bytes, max_pixels: int, asked: Asked = None) -> Image.Image:
    try:
        with warnings.catch_warnings():  # PIL's own bomb warning: our bound below is the stricter one
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opening = Image.open(io.BytesIO(raw))  # lazy: the header only
        with opening as opened:
            width, height = opened.size
            if width * height > max_pixels:
                raise ImageTooLarge(
                    f"the image is {width}x{height} = {width * height} pixels, over the limit of "
                    f"{max_pixels} (remote.max_image_pixels); ask for a smaller size or raise the limit"
                )
            if asked is not None and width * height > reply_bound(asked):
                raise ImageTooLarge(
                    f"the image is {width}x{height}, far larger than the {asked[0]}x{asked[1]} asked for "
                    f"(over {reply_bound(asked)} pixels: each side at most twice it, plus 64); the server "
                    "did not honour the size"
                )
            opened.load()
            # convert() copies even an RGB image (a copy per generator reply, for nothing)
            image = opened if opened.mode == "RGB" else opened.convert("RGB")
    except ImageTooLarge:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"the image is a decompression bomb ({exc})") from None
    except _DECODE_ERRORS as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    if image is opened and plain_rgb_png(raw):
        _ENCODED.put(image, (False, _FILE_LEVEL), raw)
    return image


_FILE_LEVEL = 6
"""PIL's default zlib level, which every written image uses."""
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def plain_rgb_png(raw: bytes) -> bool:
    """True when ``raw`` is a PNG of 8-bit RGB pixels, not interlaced, made of IHDR, IDAT and IEND
    chunks only and nothing after IEND: bytes that say exactly the pixels and nothing else (no text,
    colour profile or private chunk), so they can be stored and sent as they came. Only the chunk
    headers are read (the pixels were decoded just before)."""
    if not raw.startswith(_PNG_SIGNATURE):
        return False
    at, seen_iend, first = len(_PNG_SIGNATURE), False, True
    while at + 12 <= len(raw) and not seen_iend:
        length = int.from_bytes(raw[at : at + 4], "big")
        kind = raw[at + 4 : at + 8]
        if first:
            if kind != b"IHDR" or length != 13:
                return False
            depth, colour, interlace = raw[at + 16], raw[at + 17], raw[at + 20]
            if (depth, colour, interlace) != (8, 2, 0):
                return False
            first = False
        elif kind == b"IEND":
            seen_iend = True
        elif kind != b"IDAT":
            return False
        at += 12 + length
    return seen_iend and at == len(raw)


def decode_base64_image(
    data: str, max_chars: int = MAX_REPLY_CHARS, max_pixels: int = MAX_IMAGE_PIXELS, asked: Asked = None
) -> Image.Image:
    """Base64 text of an image -> a loaded RGB image; ``ValueError`` when too long, not base64 or not
    an image, :class:`ImageTooLarge` over ``max_pixels`` (see :func:`decode_image`)."""
    if len(data) > max_chars:
        raise ValueError(f"{len(data)} base64 characters, over the limit of {max_chars}")
    if _worth_a_thread(_head(data), len(data) * 3 // 4):  # the base64 step goes too: a few ms per MB
        return green.call_blocking(_codecs, lambda: _decode(_from_base64(data), max_pixels, asked))
    return _decode(_from_base64(data), max_pixels, asked)


def _head(data: str) -> bytes:
    """The first 24 bytes that base64 text stands for (empty when it is not base64: the full decode
    says why)."""
    try:
        return base64.b64decode(data[:32], validate=True)
    except (binascii.Error, ValueError):
        return b""


def _from_base64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
