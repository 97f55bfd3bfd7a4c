"""The "/edit" request as the authors' clients send it, checked and turned into a worker job.

Why the checks live here, in the web process: a malformed body, a bad base64 string or a PNG whose
header claims billions of pixels must be answered 400 at once, without occupying a model worker.
Only the cheap part runs here (JSON, base64, the image header); the full decode runs in the worker.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

from PIL import Image

from interleave_thinker.backends.references import WIRE_MAX_REFERENCES
from interleave_thinker.core.errors import RequestError

DEFAULT_MAX_PROMPT_CHARS = 16_384
"""Far above any prompt an image model reads (FLUX.2's text encoder takes 512 tokens), far below what
costs seconds and megabytes to handle."""
SEED_RANGE = (-(2**63), 2**64 - 1)
"""What ``torch.Generator.manual_seed`` accepts."""
MIN_SIDE = 16
"""The smallest output side a diffusion pipeline takes: FLUX.2, Qwen-Image and the tiny model need
sides of at least twice the VAE's scale factor (8), or their first layer gets an empty input."""
MAX_REFERENCES = WIRE_MAX_REFERENCES
"""Reference images a request may carry beside the edited one (the most any client here sends); the
worker then refuses (400) more than its backend takes. Each is bounded like ``image``: its bytes by
the body limit, its pixels by --max-pixels, read from its header here."""


@dataclass(frozen=True)
class EditJob:
    """What a worker needs for one ``generate`` call; plain data so it pickles cheaply."""

    prompt: str
    image_png: bytes | None
    width: int
    height: int
    seed: int
    steps: int | None
    guidance: float | None
    reference_pngs: tuple[bytes, ...] = ()
    """Reference images after ``image_png``, in the order the request gave them."""

    def to_message(self) -> dict[str, Any]:
        return asdict(self)


def _number(data: dict[str, Any], keys: tuple[str, ...], kind: type) -> Any:
    """The first present key of ``keys`` as ``kind`` (int or float); None when all are absent or null."""
    for key in keys:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RequestError(400, f"'{key}' must be a number, got {json.dumps(value)[:40]}.")
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise RequestError(400, f"'{key}' must be an integer, got {value}.")
            return int(value)
        if not math.isfinite(value):
            raise RequestError(400, f"'{key}' must be finite, got {value}.")
        return float(value)
    return None


def check_text(value: str, field: str) -> None:
    """400 for text no model can take: a lone UTF-16 surrogate (a cut-off emoji, escaped in JSON as
    ``\\ud83d``) cannot be encoded for a tokenizer. The message does not quote the text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(
            400,
            f"'{field}' holds a lone surrogate (U+{ord(value[exc.start]):04X} at character {exc.start}), "
            "which is not text; send valid UTF-8 (a whole emoji, or none).",
        ) from None


def image_size(png: bytes, max_pixels: int, field: str = "'image'") -> tuple[int, int]:
    """Width and height from the image header only; 400 when unreadable or over ``max_pixels``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(png)) as image:
                width, height = image.size
    except Image.DecompressionBombError as exc:
        raise RequestError(400, f"{field} is a decompression bomb: {exc}; send a smaller image.") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise RequestError(400, f"{field} is not a readable image ({type(exc).__name__}: {exc}).") from None
    if width * height > max_pixels:
        raise RequestError(
            400,
            f"{field} is {width}x{height} = {width * height} pixels, over the limit of {max_pixels} "
            "(the service's --max-pixels).",
        )
    return width, height


def reference_field(index: int) -> str:
    """How errors name the ``index``-th reference (the image after the edited one)."""
    return f"reference image {index + 1} ('image' item {index + 2})"


def decode_image(png: bytes, max_pixels: int, field: str = "'image'") -> Image.Image:
    """Full decode in the worker (header checked again: the worker trusts nobody)."""
    image_size(png, max_pixels, field)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(png)) as image:
                return image.convert("RGB")
    except (OSError, ValueError, SyntaxError) as exc:
        raise RequestError(400, f"{field} could not be decoded ({type(exc).__name__}: {exc}).") from None


def encode_png_b64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _image_bytes(value: Any) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RequestError(400, "'image' must be a base64 string, a list of them, or null.")
    return _base64(value, "'image'")


def _base64(value: str, field: str) -> bytes:
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(400, f"{field} is not valid base64 ({exc}).") from None


def check_image_count(count: int) -> None:
    """400 for more input images than the edited one and :data:`MAX_REFERENCES` references."""
    if count > 1 + MAX_REFERENCES:
        raise RequestError(
            400,
            f"'image' holds {count} images, over the limit of {1 + MAX_REFERENCES} (the edited image "
            f"and {MAX_REFERENCES} reference images); send fewer references.",
        )


def _input_images(value: Any) -> tuple[bytes | None, tuple[bytes, ...]]:
    """``image`` as one base64 string (or null), or a list: the edited image, then the references."""
    if not isinstance(value, list):
        return _image_bytes(value), ()
    check_image_count(len(value))
    pngs: list[bytes] = []
    for index, item in enumerate(value):
        field = "'image' item 1" if index == 0 else reference_field(index - 1)
        if not isinstance(item, str) or not item:
            raise RequestError(400, f"{field} must be a base64 string.")
        pngs.append(_base64(item, field))
    return (pngs[0], tuple(pngs[1:])) if pngs else (None, ())


def json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object (400 otherwise), for ``/edit`` and the OpenAI routes."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"The body is not valid JSON: {exc}.") from None
    except RecursionError:
        raise RequestError(400, "The body is not valid JSON: it is nested too deeply.") from None
    if not isinstance(data, dict):
        raise RequestError(400, "The body must be a JSON object with at least 'prompt'.")
    return data


def parse_edit_request(
    body: bytes, *, max_pixels: int, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
) -> EditJob:
    """Checked job from an "/edit" body; unknown knobs (``enhance_prompt``, ``negative_prompt``...) are
    ignored; the knobs map as in :func:`job_from_fields`."""
    # 1. JSON object; the input image as base64, or a list of them (the edited image, then references).
    data = json_object(body)
    png, references = _input_images(data.get("image"))
    return job_from_fields(
        data, png, max_pixels=max_pixels, max_prompt_chars=max_prompt_chars, references=references
    )


def job_from_fields(
    data: dict[str, Any],
    png: bytes | None,
    *,
    max_pixels: int,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
    references: tuple[bytes, ...] = (),
) -> EditJob:
    """The one mapping from request knobs to ``generate`` arguments, for ``/edit`` and ``/v1/images/*``.

    ``num_inference_step`` (the authors' spelling) or ``num_inference_steps`` -> steps;
    ``guidance_scale`` (else omnigen2's ``text_guidance_scale``, else the diffusion engines'
    ``true_cfg_scale``) -> guidance; width and height default to the input image's size, else 1024.
    """
    # 1. A bounded prompt.
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise RequestError(400, "Missing 'prompt': the body needs a 'prompt' string.")
    if len(prompt) > max_prompt_chars:
        raise RequestError(
            400,
            f"'prompt' has {len(prompt)} characters, over the limit of {max_prompt_chars} "
            "(the service's --max-prompt-chars).",
        )
    check_text(prompt, "prompt")
    # 2. Optional input image and references: readable headers, bounded sizes.
    size = image_size(png, max_pixels) if png is not None else (1024, 1024)
    for index, reference in enumerate(references):
        image_size(reference, max_pixels, reference_field(index))
    # 3. Knobs.
    width = _number(data, ("width",), int)
    height = _number(data, ("height",), int)
    width, height = (size[0] if width is None else width), (size[1] if height is None else height)
    if width < MIN_SIDE or height < MIN_SIDE or width * height > max_pixels:
        raise RequestError(
            400,
            f"Output size {width}x{height} is not allowed: sides >= {MIN_SIDE}, at most {max_pixels} "
            "pixels (the service's --max-pixels).",
        )
    seed = _number(data, ("seed",), int) or 0
    if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise RequestError(400, f"'seed' {seed} is out of range {SEED_RANGE[0]}..{SEED_RANGE[1]}.")
    steps = _number(data, ("num_inference_step", "num_inference_steps"), int)
    if steps is not None and not 1 <= steps <= 1000:
        raise RequestError(400, f"'num_inference_step' must be in 1..1000, got {steps}.")
    guidance = _number(data, ("guidance_scale", "text_guidance_scale", "true_cfg_scale"), float)
    return EditJob(prompt, png, width, height, seed, steps, guidance, references)
