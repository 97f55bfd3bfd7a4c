"""Image helpers shared by backends."""

from __future__ import annotations

import math
from typing import Any

from PIL import Image, ImageOps

from interleave_thinker.backends.protocols import Message


def bound_pixels(image: Image.Image, max_pixels: int, factor: int = 32) -> Image.Image:
    """Shrink ``image`` (keeping its aspect) to at most ``max_pixels``, sides multiples of ``factor``.

    This is how Qwen-VL processors bound an image part that carries ``max_pixels``; we apply it before
    the processor so the bound holds with any processor or server.
    """
    width, height = image.size
    if width * height <= max_pixels:
        return image
    scale = math.sqrt(max_pixels / (width * height))
    new_w = max(factor, math.floor(width * scale / factor) * factor)
    new_h = max(factor, math.floor(height * scale / factor) * factor)
    return image.resize((new_w, new_h), Image.Resampling.BICUBIC)


def apply_max_pixels(messages: list[Message], factor: int = 32) -> list[Message]:
    """Copy of ``messages`` with every image part bounded by its own ``max_pixels`` (key removed)."""
    result: list[Message] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            result.append(dict(message))
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            if part.get("type") == "image":
                image = part["image"]
                image = image if image.mode == "RGB" else image.convert("RGB")  # no copy: only read
                if part.get("max_pixels"):
                    image = bound_pixels(image, int(part["max_pixels"]), factor)
                parts.append({"type": "image", "image": image})
            else:
                parts.append(dict(part))
        result.append({**message, "content": parts})
    return result


def fit_to_size(image: Image.Image, width: int, height: int) -> Image.Image:
    """RGB ``image`` center-cropped to the requested aspect and resized, so a service that only offers a
    few sizes or aspect ratios never returns a distorted picture or another size than asked for."""
    image = image.convert("RGB")
    if image.size == (width, height):
        return image
    return ImageOps.fit(image, (width, height), Image.Resampling.LANCZOS)
