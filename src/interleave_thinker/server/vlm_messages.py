"""Chat-completions messages -> the project's messages, for ``serve vlm``: text checked, images bounded.

Why two steps for an image: a request that waits for the one-at-a-time model holds only its bytes,
checked from the header (format, pixels) and counted against ``--max-images`` before any is read;
:func:`decode_images` turns them into pixels inside the model call, so at most one request's images
are decoded at a time, however many wait.
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict

from interleave_thinker.backends.protocols import Message
from interleave_thinker.core.images import MAX_IMAGE_PIXELS
from interleave_thinker.server.settings import DEFAULT_MAX_IMAGES
from interleave_thinker.server.vlm_errors import RequestError


class ImageURL(BaseModel):
    url: str


class ContentPart(BaseModel):
    """``{"type": "text", "text"}`` or ``{"type": "image_url", "image_url": {"url"}}`` (or a bare url)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    image_url: ImageURL | str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


@dataclass(frozen=True)
class EncodedImage:
    """An image part whose header was checked; its pixels are decoded by :func:`decode_images`."""

    raw: bytes
    where: str


def to_project_messages(
    messages: list[ChatMessage],
    max_pixels: int = MAX_IMAGE_PIXELS,
    max_images: int = DEFAULT_MAX_IMAGES,
) -> list[Message]:
    """Chat-completions messages -> the project's parts, each data-URL image as an
    :class:`EncodedImage` (format and size read from its header, nothing decoded); more than
    ``max_images`` images is a 400, counted before any is read."""
    count = sum(
        part.type == "image_url" for m in messages if isinstance(m.content, list) for part in m.content
    )
    if count > max_images:
        raise RequestError(
            400,
            f"messages: {count} images, over this server's limit of {max_images} per request "
            "(serve vlm --max-images); send fewer.",
        )
    result: list[Message] = []
    for index, message in enumerate(messages):
        content = message.content
        parts: list[dict[str, Any]] = []
        if isinstance(content, str):
            parts.append({"type": "text", "text": _text(content, f"messages[{index}].content")})
        for part in content if isinstance(content, list) else []:
            if part.type == "text":
                parts.append({"type": "text", "text": _text(part.text or "", f"messages[{index}].content")})
            elif part.type == "image_url" and part.image_url is not None:
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                raw = checked_data_url(url, where=f"messages[{index}]", max_pixels=max_pixels)
                parts.append({"type": "image", "image": EncodedImage(raw, f"messages[{index}]")})
            else:
                raise RequestError(
                    400,
                    f"messages[{index}]: unsupported content part type {part.type!r}; "
                    "use 'text' or 'image_url'.",
                )
        role = "system" if message.role == "developer" else message.role  # OpenAI's newer name for it
        result.append({"role": role, "content": parts})
    return result


def _text(value: str, where: str) -> str:
    """``value``, or a 400 when it holds a lone UTF-16 surrogate (a cut-off emoji escaped in JSON as
    ``\\ud83d``): no tokenizer takes it. The message does not quote the text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(
            400,
            f"{where}: a lone surrogate (U+{ord(value[exc.start]):04X} at character {exc.start}) is not "
            "text; send valid UTF-8 (a whole emoji, or none).",
        ) from None
    return value


def decode_images(messages: list[Message]) -> list[Message]:
    """``messages`` with each :class:`EncodedImage` decoded to an RGB PIL image (a 400 when its pixels
    do not decode)."""
    return [{"role": m["role"], "content": [_decoded(part) for part in m["content"]]} for m in messages]


def _decoded(part: Any) -> Any:
    image = part.get("image")
    if not isinstance(image, EncodedImage):
        return part
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(image.raw)) as opened:
                return {**part, "image": opened.convert("RGB")}
    except (ValueError, UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise RequestError(400, f"{image.where}: the data URL is not a readable image ({exc}).") from None


def checked_data_url(url: str, *, where: str = "image_url", max_pixels: int = MAX_IMAGE_PIXELS) -> bytes:
    """The image bytes of ``data:image/...;base64,...``; anything else is a 400, and so is an image
    whose header declares more than ``max_pixels`` (read from the header: nothing is decoded)."""
    header, sep, payload = url.partition(",")
    if not (url.startswith("data:image/") and sep and header.endswith(";base64")):
        raise RequestError(
            400,
            f"{where}: only base64 data URLs (data:image/png;base64,...) are accepted; "
            "this server does not fetch remote images.",
        )
    try:
        raw = base64.b64decode(payload, validate=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:  # lazy: reads the header only
                width, height = image.size
                if width * height > max_pixels:
                    raise RequestError(
                        400,
                        f"{where}: the image is {width}x{height} = {width * height} pixels, over this "
                        f"server's limit of {max_pixels} (serve vlm --max-pixels); send a smaller one.",
                    )
                return raw
    except (binascii.Error, ValueError, UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise RequestError(400, f"{where}: the data URL is not a readable image ({exc}).") from None
