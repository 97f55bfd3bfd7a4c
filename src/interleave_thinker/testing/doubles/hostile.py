"""A hostile server on 127.0.0.1: the images API, "/edit" and chat completions, each answering one
hostile shape, so tests can hold every served backend to its bounds (``remote.deadline``,
``remote.max_reply_mb``, ``remote.max_image_pixels``).

Shapes (:data:`SHAPES`):

- ``bomb``: a valid PNG of 12000² black pixels, a few hundred KB on the wire and 432 MB once decoded
  (images routes; a chat reply is answered normally);
- ``oversized``: a valid PNG of 4096² black pixels whatever size was asked for: within
  ``remote.max_image_pixels``, far over any small request (48 MB once decoded);
- ``drip``: a normal reply sent one byte at a time, status line and headers included;
- ``huge``: a JSON reply of ``huge_bytes`` streamed in chunks, without a Content-Length;
- ``inflating``: a small gzip-encoded reply that inflates to ``huge_bytes``;
- ``surrogate``: a lone UTF-16 surrogate (a cut-off emoji) where text goes: in a chat reply's content,
  in the message of an images error (400).

The wire formats are the real ones (OpenAI chat completions and images, vLLM-Omni's images, the
authors' "/edit"), so the backends under test take the replies as they would from those servers.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import zlib
from collections.abc import Iterator
from typing import Any

from PIL import Image

from interleave_thinker.testing.doubles.server import Handle, Reply, Request

SHAPES = ("bomb", "oversized", "drip", "huge", "inflating", "surrogate")
BOMB_SIDE = 12000
OVERSIZED_SIDE = 4096
HUGE_BYTES = 200 * 1024 * 1024
DRIP_SECONDS = 0.05
LONE_SURROGATE = "\ud83d"


def _chunk(kind: str, data: bytes) -> bytes:
    return (
        len(data).to_bytes(4, "big")
        + kind.encode()
        + data
        + zlib.crc32(kind.encode() + data).to_bytes(4, "big")
    )


def repeated(prefix: bytes, block: bytes, times: int, suffix: bytes, *, gzip: bool = False) -> bytes:
    """The zlib (or gzip) stream of ``prefix + block * times + suffix``, made by compressing ``block``
    once: after a full flush the compressor starts afresh on a byte boundary, so the same block always
    compresses to the same bytes, which are repeated; the checksums are computed over the whole."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)
    head = packer.compress(prefix) + packer.flush(zlib.Z_FULL_FLUSH)
    body = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.compress(suffix) + packer.flush(zlib.Z_FULL_FLUSH)
    check = zlib.crc32(prefix) if gzip else zlib.adler32(prefix)
    for _ in range(times):
        check = zlib.crc32(block, check) if gzip else zlib.adler32(block, check)
    check = zlib.crc32(suffix, check) if gzip else zlib.adler32(suffix, check)
    size = len(prefix) + len(block) * times + len(suffix)
    trailer = (
        check.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little")
        if gzip
        else check.to_bytes(4, "big")
    )
    return head + body * times + end + b"\x03\x00" + trailer  # an empty final block, then the checksum


@functools.cache
def bomb_png(side: int = BOMB_SIDE) -> bytes:
    """A valid ``side`` x ``side`` black RGB PNG (never held decoded here)."""
    row = b"\x00" * (1 + 3 * side)  # filter byte "none", then the pixels
    idat = repeated(b"", row, side, b"")
    header = side.to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + _chunk("IHDR", header) + _chunk("IDAT", idat) + _chunk("IEND", b"")


@functools.cache
def small_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def _protocol(path: str) -> str:
    if path.rstrip("/").endswith("/edit"):
        return "edit"
    if "/images/" in path:
        return "images"
    return "chat"


def _image_reply(protocol: str, png: bytes) -> dict[str, Any]:
    encoded = base64.b64encode(png).decode("ascii")
    if protocol == "edit":
        return {"success": True, "edited_image": encoded}
    return {"created": 1, "data": [{"b64_json": encoded}]}


def _chat_reply(text: str) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    return {"id": "x", "object": "chat.completion", "model": "hostile", "choices": [choice]}


def _huge_parts(protocol: str, size: int) -> tuple[bytes, bytes]:
    """The JSON around a ``size``-byte string field of the protocol's reply."""
    marker = "@@HUGE@@"
    if protocol == "chat":
        template = json.dumps(_chat_reply(marker))
    elif protocol == "edit":
        template = json.dumps({"success": True, "edited_image": marker})
    else:
        template = json.dumps({"created": 1, "data": [{"b64_json": marker}]})
    before, _, after = template.partition(marker)
    return before.encode(), after.encode()


def _huge_chunks(protocol: str, size: int, chunk: int = 1024 * 1024) -> Iterator[bytes]:
    before, after = _huge_parts(protocol, size)
    yield before
    block = b"A" * chunk
    for _ in range(size // chunk):
        yield block
    yield after


@functools.cache
def inflating_body(protocol: str, size: int = HUGE_BYTES) -> bytes:
    """The gzip of a ``size``-byte reply (a few hundred KB)."""
    before, after = _huge_parts(protocol, size)
    block = b"A" * (1024 * 1024)
    return repeated(before, block, size // len(block), after, gzip=True)


def _models() -> dict[str, Any]:
    return {"object": "list", "data": [{"id": "hostile", "object": "model"}]}


def handler(shape: str, *, huge_bytes: int = HUGE_BYTES, drip: float = DRIP_SECONDS) -> Handle:
    """The request handler answering every POST with ``shape`` (GETs of a model list answer normally)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")

    def handle(request: Request) -> Reply:
        if request.method == "GET":
            return Reply(body=_models())
        protocol = _protocol(request.path)
        normal = _chat_reply("ok") if protocol == "chat" else _image_reply(protocol, small_png())
        if shape == "bomb":
            return Reply(body=normal if protocol == "chat" else _image_reply(protocol, bomb_png()))
        if shape == "oversized":
            return Reply(
                body=normal if protocol == "chat" else _image_reply(protocol, bomb_png(OVERSIZED_SIDE))
            )
        if shape == "drip":
            return Reply(body=normal, drip=drip)
        if shape == "huge":
            return Reply(chunks=_huge_chunks(protocol, huge_bytes))
        if shape == "inflating":
            return Reply(body=inflating_body(protocol, huge_bytes), headers={"Content-Encoding": "gzip"})
        text = f"cut off {LONE_SURROGATE}"
        if protocol == "chat":
            return Reply(body=json.dumps(_chat_reply(text)).encode())  # "\ud83d" escaped, as JSON allows
        error: dict[str, Any] = {"error": {"message": text, "type": "invalid_request_error", "code": 400}}
        if protocol == "edit":
            error = {"success": False, "error": text}
        return Reply(400, json.dumps(error).encode())

    return handle
