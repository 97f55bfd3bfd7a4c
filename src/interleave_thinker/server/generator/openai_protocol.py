"""The OpenAI images API with the diffusion engines' extensions, checked and turned into a worker job.

Why a second request format: vLLM-Omni and SGLang Diffusion serve ``/v1/images/generations`` (JSON)
and ``/v1/images/edits`` (multipart, the input image as the file field ``image``; several images as
repeated ``image`` parts or, as ``openai-python`` sends a list, ``image[]`` parts), with ``size``
"WxH", ``seed``, ``num_inference_steps``, ``guidance_scale`` / ``true_cfg_scale``. Answering the same
routes lets one generator spec (``vllm-omni:URL``) move between those engines and this service. The
fields become the ``/edit`` knobs and go through the one mapping of
:func:`~.protocol.job_from_fields`, so both routes give the same pixels for the same request.

Accepted as the engines accept them and checked: ``n`` (only 1), ``response_format`` (only
``b64_json``), ``output_format`` (only ``png``), ``generator_device`` (only ``cpu``: the workers seed a
CPU generator, as the local backend does), ``model`` (only the served one). Ignored, as ``/edit``
ignores them: ``negative_prompt`` and OpenAI's ``quality``, ``style``, ``user``, ``background``...
"""

from __future__ import annotations

import json
import re
from typing import Any

from interleave_thinker.server.generator.protocol import (
    DEFAULT_MAX_PROMPT_CHARS,
    EditJob,
    RequestError,
    check_image_count,
    job_from_fields,
    json_object,
)

_SIZE = re.compile(r"\s*(\d{1,6})\s*[xX]\s*(\d{1,6})\s*")
_NUMBERS = ("seed", "num_inference_steps", "guidance_scale", "true_cfg_scale", "n")
MAX_FIELD_CHARS = 64
"""Every form field but the prompt is a number or a short word."""


def error_body(status: int, message: str) -> dict[str, Any]:
    """vLLM's error shape, which OpenAI clients and our ``vllm-omni:`` backend read."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 401:
        kind = "authentication_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _size(value: Any) -> tuple[int, int] | None:
    if value is None or value == "auto":
        return None
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise RequestError(
            400, f"Invalid size {str(value)[:40]!r}: 'size' must be 'WIDTHxHEIGHT', e.g. '1024x1024'."
        )
    return int(match.group(1)), int(match.group(2))


def _only(data: dict[str, Any], key: str, allowed: tuple[Any, ...]) -> None:
    """400 unless ``key`` is absent or one of ``allowed``, of the same type (``true`` is not ``1``)."""
    value = data.get(key)
    if value is not None and not any(type(value) is type(a) and value == a for a in allowed):
        shown = json.dumps(value)[:40] if not isinstance(value, str) else repr(value[:40])
        raise RequestError(
            400, f"'{key}' {shown} is not supported here; use {' or '.join(map(repr, allowed))}."
        )


def knobs(data: dict[str, Any], served: str) -> dict[str, Any]:
    """OpenAI fields -> the ``/edit`` knobs :func:`job_from_fields` reads (size split, checks done)."""
    _only(data, "n", (1,))
    _only(data, "response_format", ("b64_json",))
    _only(data, "output_format", ("png",))
    _only(data, "generator_device", ("cpu",))
    model = data.get("model")
    if model not in (None, "", served):
        raise RequestError(
            400, f"Model mismatch: request specifies '{str(model)[:200]}' but server is running '{served}'."
        )
    result: dict[str, Any] = {
        k: data[k]
        for k in ("prompt", "seed", "num_inference_steps", "guidance_scale", "true_cfg_scale")
        if k in data
    }
    size = _size(data.get("size"))
    if size is not None:
        result["width"], result["height"] = size
    return result


def parse_generation(
    body: bytes, *, served: str, max_pixels: int, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
) -> EditJob:
    """A ``/v1/images/generations`` JSON body -> a text-to-image job."""
    data = json_object(body)
    return job_from_fields(
        knobs(data, served), None, max_pixels=max_pixels, max_prompt_chars=max_prompt_chars
    )


def form_numbers(fields: dict[str, str]) -> dict[str, Any]:
    """Multipart fields are strings: the numeric ones become numbers (400 when they are not)."""
    data: dict[str, Any] = dict(fields)
    for key in _NUMBERS:
        text = fields.get(key)
        if text is None:
            continue
        if len(text) > MAX_FIELD_CHARS:
            raise RequestError(400, f"'{key}' must be a number, got {len(text)} characters.")
        try:
            number = float(text)
            data[key] = int(text) if text.strip().lstrip("+-").isdigit() else number
        except ValueError:
            raise RequestError(400, f"'{key}' must be a number, got {text[:40]!r}.") from None
    return data


def parse_edit_form(
    fields: dict[str, str],
    pngs: bytes | list[bytes] | None,
    *,
    served: str,
    max_pixels: int,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
) -> EditJob:
    """The fields and the image files of a ``/v1/images/edits`` form -> an edit job: the first file is
    the image to edit, the others its references, in order (several ``image`` or ``image[]`` parts)."""
    files = pngs if isinstance(pngs, list) else [pngs] if pngs else []
    if not files or not files[0]:
        raise RequestError(400, "Missing 'image': send the input image as the PNG file field 'image'.")
    check_image_count(len(files))
    data = knobs(form_numbers(fields), served)
    return job_from_fields(
        data, files[0], max_pixels=max_pixels, max_prompt_chars=max_prompt_chars, references=tuple(files[1:])
    )
