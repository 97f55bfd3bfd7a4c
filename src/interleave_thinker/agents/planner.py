"""The planner agent: turns a request into an execution plan of image steps.

Templates ``planner_narrative`` (a request without images) and ``planner_guidance`` (with images,
split on ``<image>``); messages built exactly as the released planner saw them; the reply read into
a :class:`Plan` (:func:`parse_plan`) and, the inverse, a plan written as the planner would answer it
(:func:`format_plan`).

What a plan reply must hold, beyond the release's own checks (every listed field present, no folded
steps): 1 to :data:`MAX_PLAN_STEPS` steps; ``step_number`` an integer from 0 to
:data:`MAX_STEP_NUMBER`, written as an integer, an integral float or a string of ASCII digits.
"""

from __future__ import annotations

import re
from typing import Any

from PIL import Image

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.messages import (
    IMAGE_MARKER,
    Message,
    count_image_markers,
    fill,
    image_part,
    text_part,
    user_turn,
)
from interleave_thinker.agents.reply import check_text, read_reply, show, write_reply
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.core.errors import InputError, ParseError
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Plan, PlannerRecord, PlanStep

NARRATIVE_TEMPLATE = "planner_narrative"
GUIDANCE_TEMPLATE = "planner_guidance"

# -- messages -----------------------------------------------------------------------------------------

UEVAL_SUFFIX = " both visually and textually"
MANY_IMAGES = 5
"""From this many images in one turn on, the release's demo writes ``max_pixels = MANY_IMAGES_MAX_PIXELS``
into every image part (``demo_klein.py:59-67``). Its pinned transformers (4.57.1) ignores that key
(``ProcessorMixin.apply_chat_template`` keeps only the image), so the released checkpoints see such images
unreduced: the bound is applied only when asked (``agents.many_images_max_pixels``)."""
MANY_IMAGES_MAX_PIXELS = 384 * 384


def narrative_planner_messages(templates: TemplateSet, request_text: str) -> list[Message]:
    filled = fill(templates.get(NARRATIVE_TEMPLATE), text_input=request_text.replace(UEVAL_SUFFIX, ""))
    return user_turn(text_part(filled))


def planner_messages(
    templates: TemplateSet,
    request_text: str,
    images: list[Image.Image],
    many_images_max_pixels: int | None = None,
) -> list[Message]:
    """The planner's turn: without images the narrative template; with them the guidance template split
    on ``<image>``, image *i* after text piece *i* (with ``many_images_max_pixels``, a turn of
    :data:`MANY_IMAGES` or more images bounds each to it)."""
    if not images:
        return narrative_planner_messages(templates, request_text)
    markers = count_image_markers(request_text)
    if markers != len(images):
        raise InputError(
            f"The request text has {markers} <image> marker(s) but {len(images)} image(s) were given; "
            "put one <image> where each image belongs, in order."
        )
    filled = fill(templates.get(GUIDANCE_TEMPLATE), text_input=request_text)
    max_pixels = many_images_max_pixels if len(images) >= MANY_IMAGES else None
    content: list[dict[str, Any]] = []
    remaining = list(images)
    for piece in IMAGE_MARKER.split(filled):
        if piece:
            content.append(text_part(piece))
        if remaining:
            content.append(image_part(remaining.pop(0), max_pixels))
    return user_turn(*content)


# -- the reply ----------------------------------------------------------------------------------------

MAX_PLAN_STEPS = 100
MAX_STEP_NUMBER = 10_000
REQUIRED_STEP_FIELDS = ("step_number", "instruction", "prompt", "auxiliary_text")
STEP_FIELDS = ("step_number", "step_name", "instruction", "prompt", "auxiliary_text")
"""The fields of a step, in the order the release writes them."""
MALFORMED_STEP_SIGNATURE = "None}, {'step_number'"
"""A known failure: the model folds two plan steps into one string field."""

_STEP_DIGITS = re.compile(r"\s*[0-9]{1,9}\s*")


def _optional_str(step: dict[str, Any], key: str, index: int, raw: str) -> str | None:
    value = step[key]
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(
            f"step {index}: '{key}' must be a string or null, got {type(value).__name__}", raw=raw
        )
    if MALFORMED_STEP_SIGNATURE in value:
        raise ParseError(f"step {index}: '{key}' holds two steps folded into one string", raw=raw)
    return clean_text(value)


def _step_number(value: Any, index: int, raw: str) -> int:
    number: int | None = None
    if isinstance(value, bool):
        raise ParseError(f"step {index}: 'step_number' must be an integer, got a bool", raw=raw)
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer() and abs(value) <= MAX_STEP_NUMBER:
        number = int(value)
    elif isinstance(value, str) and _STEP_DIGITS.fullmatch(value):
        number = int(value.strip())
    if number is None:
        raise ParseError(f"step {index}: 'step_number' must be an integer, got {show(value)}", raw=raw)
    if not 0 <= number <= MAX_STEP_NUMBER:
        shown = str(number) if number.bit_length() < 64 else "a very large integer"
        raise ParseError(f"step {index}: 'step_number' {shown} is outside 0-{MAX_STEP_NUMBER}", raw=raw)
    return number


def _plan_steps(value: Any, raw: str) -> list[Any]:
    if isinstance(value, dict):
        if "execution_plan" not in value:
            raise ParseError("the answer has no 'execution_plan' key", raw=raw)
        value = value["execution_plan"]
    elif not isinstance(value, list):
        raise ParseError(f"the answer is a {type(value).__name__}, not a plan", raw=raw)
    if not isinstance(value, list) or not value:
        raise ParseError("'execution_plan' must be a non-empty list of steps", raw=raw)
    if len(value) > MAX_PLAN_STEPS:
        raise ParseError(f"the plan has {len(value)} steps, more than {MAX_PLAN_STEPS}", raw=raw)
    return value


def _plan_step(step: Any, index: int, raw: str) -> PlanStep:
    if not isinstance(step, dict):
        raise ParseError(f"step {index} is a {type(step).__name__}, not a dict", raw=raw)
    missing = [key for key in REQUIRED_STEP_FIELDS if key not in step]
    if missing:
        raise ParseError(f"step {index} lacks {', '.join(missing)}", raw=raw)
    name = step.get("step_name")
    return PlanStep(
        step_number=_step_number(step["step_number"], index, raw),
        step_name=clean_text(name) if isinstance(name, str) else None,
        instruction=_optional_str(step, "instruction", index, raw),
        prompt=_optional_str(step, "prompt", index, raw),
        auxiliary_text=_optional_str(step, "auxiliary_text", index, raw),
    )


def parse_plan(reply: str) -> Plan:
    """Parse a planner reply into a :class:`Plan`, rejecting it as the release does."""
    read = read_reply(reply)
    steps = [_plan_step(step, i, read.text) for i, step in enumerate(_plan_steps(read.answer, read.text), 1)]
    return Plan(steps=steps, reasoning=read.reasoning)


def _step_value(step: PlanStep, index: int, key: str) -> Any:
    value = getattr(step, key)
    if isinstance(value, str):
        check_text(value, f"step {index}: '{key}'")
        if key != "step_name" and MALFORMED_STEP_SIGNATURE in value:
            raise ValueError(
                f"step {index}: '{key}' holds {MALFORMED_STEP_SIGNATURE!r}, which parsing refuses"
            )
    elif key == "step_number" and not 0 <= value <= MAX_STEP_NUMBER:
        raise ValueError(f"step {index}: 'step_number' {value} is outside 0-{MAX_STEP_NUMBER}")
    return value


def format_plan(plan: Plan) -> str:
    """The reply a planner would write for ``plan``: ``parse_plan(format_plan(plan)) == plan``.

    ``ValueError`` for a plan no reply can carry (no steps or too many, a step number out of range,
    text that parsing would change); ``fallback`` is not part of a reply (a parsed plan has it False).
    """
    if not 1 <= len(plan.steps) <= MAX_PLAN_STEPS:
        raise ValueError(f"a plan reply holds 1 to {MAX_PLAN_STEPS} steps, not {len(plan.steps)}")
    steps = [{key: _step_value(step, i, key) for key in STEP_FIELDS} for i, step in enumerate(plan.steps, 1)]
    return write_reply({"execution_plan": steps}, plan.reasoning)


# -- the agent ----------------------------------------------------------------------------------------


class Planner(Agent):
    ROLE = "planner"

    many_images_max_pixels: int | None = None
    """The pixel bound of each image in a turn of five or more (``agents.many_images_max_pixels``); None:
    none, as the released checkpoints were run."""

    def plan(self, request_text: str, images: list[Image.Image], turn: Turn | None = None) -> PlannerRecord:
        """Ask for a plan; the record holds the plan or, after all retries, only the raw replies and errors
        (and, with ``turn``, every call's seed)."""
        messages = planner_messages(self.templates, request_text, images, self.many_images_max_pixels)
        outcome = self.ask(messages, parse_plan, turn)
        return PlannerRecord(
            raw_replies=outcome.raw_replies,
            errors=outcome.errors,
            plan=outcome.value,
            duration_s=round(outcome.duration_s, 4),
            seeds=outcome.seeds,
        )


def single_step_plan(request_text: str) -> Plan:
    """The fallback plan: the request itself as one image step."""
    text = " ".join(IMAGE_MARKER.sub(" ", request_text).split())
    return Plan.model_validate(
        {
            "steps": [
                {
                    "step_number": 1,
                    "step_name": "Request",
                    "instruction": text,
                    "prompt": text,
                    "auxiliary_text": None,
                }
            ],
            "fallback": True,
        }
    )
