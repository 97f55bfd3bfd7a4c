"""Chat messages for the planner and the critic, built exactly as the released checkpoints saw them.

Messages are OpenAI/Qwen-style: ``[{"role": "user", "content": [part, ...]}]`` where a part is
``{"type": "text", "text": str}`` or ``{"type": "image", "image": PIL.Image, "max_pixels"?: int}``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from PIL import Image

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.prompt_store import TemplateSet

Message = dict[str, Any]

IMAGE_MARKER = re.compile(r"<image>", re.IGNORECASE)
UEVAL_SUFFIX = " both visually and textually"
MANY_IMAGES = 5
"""From this many images in one turn on, every image part is bounded to ``MANY_IMAGES_MAX_PIXELS``."""
MANY_IMAGES_MAX_PIXELS = 384 * 384
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


def narrative_planner_messages(templates: TemplateSet, request_text: str) -> list[Message]:
    filled = fill(templates.get("planner_narrative"), text_input=request_text.replace(UEVAL_SUFFIX, ""))
    return [{"role": "user", "content": [text_part(filled)]}]


def guidance_planner_messages(
    templates: TemplateSet, request_text: str, images: list[Image.Image]
) -> list[Message]:
    """Split the filled template on ``<image>`` and put image *i* after text piece *i*."""
    markers = count_image_markers(request_text)
    if markers != len(images):
        raise InputError(
            f"The request text has {markers} <image> marker(s) but {len(images)} image(s) were given; "
            "put one <image> where each image belongs, in order."
        )
    filled = fill(templates.get("planner_guidance"), text_input=request_text)
    max_pixels = MANY_IMAGES_MAX_PIXELS if len(images) >= MANY_IMAGES else None
    content: list[dict[str, Any]] = []
    remaining = list(images)
    for piece in IMAGE_MARKER.split(filled):
        if piece:
            content.append(text_part(piece))
        if remaining:
            content.append(image_part(remaining.pop(0), max_pixels))
    return [{"role": "user", "content": content}]


def planner_messages(templates: TemplateSet, request_text: str, images: list[Image.Image]) -> list[Message]:
    if images:
        return guidance_planner_messages(templates, request_text, images)
    return narrative_planner_messages(templates, request_text)


def critic_messages(
    templates: TemplateSet,
    *,
    before: Image.Image,
    after: Image.Image,
    original_instruction: str,
    rewritten_prompt: str,
) -> list[Message]:
    """``[before, after, text]`` in this order, as the critic was trained."""
    text = fill(
        templates.get("critic"),
        original_instruction=original_instruction,
        rewritten_prompt=rewritten_prompt,
    )
    return [{"role": "user", "content": [image_part(before), image_part(after), text_part(text)]}]


def judge_semantic_messages(
    templates: TemplateSet, *, before: Image.Image, after: Image.Image, instruction: str
) -> list[Message]:
    """SC: context + rule + SC texts joined by newlines, ``<instruction>`` filled; images ``[before, after]``.

    The "after" image is resized to the "before" image's size, as the release's judge does.
    """
    text = "\n".join(
        [templates.get("judge_context"), templates.get("judge_edit_rule"), templates.get("judge_edit_sc")]
    ).replace("<instruction>", instruction)
    if after.size != before.size:
        after = after.resize(before.size, Image.Resampling.BICUBIC)
    return [{"role": "user", "content": [image_part(before), image_part(after), text_part(text)]}]


def judge_quality_messages(templates: TemplateSet, *, after: Image.Image) -> list[Message]:
    """PQ: context + PQ texts joined by a newline; image ``[after]``."""
    text = templates.get("judge_context") + "\n" + templates.get("judge_pq")
    return [{"role": "user", "content": [image_part(after), text_part(text)]}]
