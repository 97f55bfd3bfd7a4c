"""The pieces every agent's chat messages are built from, laid out as the released checkpoints saw them.

Messages are OpenAI/Qwen-style: ``[{"role": "user", "content": [part, ...]}]`` where a part is
``{"type": "text", "text": str}`` or ``{"type": "image", "image": PIL.Image, "max_pixels"?: int}``.
Each agent's module builds its own messages from these (planner, critic, judge).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from PIL import Image

from interleave_thinker.backends.protocols import Message

IMAGE_MARKER = re.compile(r"<image>", re.IGNORECASE)
CANVAS_SIZE = (1024, 1024)


def fill(template: str, **values: str) -> str:
    """Plain ``{name}`` replacement (never ``str.format``: the templates contain braces)."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


@functools.cache
def white_canvas(size: tuple[int, int] = CANVAS_SIZE) -> Image.Image:
    """The "before" image of a text-to-image step, as the release uses it (white RGB, 1024x1024).

    Made once and shared: backends only read images.
    """
    return Image.new("RGB", size, (255, 255, 255))


def count_image_markers(text: str) -> int:
    return len(IMAGE_MARKER.findall(text))


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_part(image: Image.Image, max_pixels: int | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "image", "image": image}
    if max_pixels is not None:
        part["max_pixels"] = max_pixels
    return part


def user_turn(*parts: dict[str, Any]) -> list[Message]:
    """One user message holding ``parts`` in order: every agent asks in a single turn."""
    return [{"role": "user", "content": list(parts)}]
