"""What a diffusion server's error reply means, in one message that says what to change.

vLLM-Omni raises FastAPI ``HTTPException``s that vLLM's app turns into
``{"error": {"message", "type", "param", "code"}}`` (older servers: ``{"object": "error", "message"}``
or FastAPI's own ``{"detail": ...}``; ``--api-key`` rejections: ``{"error": "Unauthorized"}``). The
messages we recognise come from its ``api_server.py``: "Model mismatch: request specifies 'X' but
server is running 'Y'.", "Requested image size WxH exceeds the maximum allowed size of N pixels.",
"Invalid size ...", and input-image limits of models that cannot edit.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import httpx

from interleave_thinker.backends.remote import RETRYABLE_STATUS, RetryableError, parse_retry_after
from interleave_thinker.core.errors import BackendError

MAX_DETAIL = 400
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_SERVED = re.compile(r"server is running '([^']{0,300})'")
_EDIT_REFUSALS = ("does not support image", "input image", "image input", "cannot edit", "not support edit")


class _Backend(Protocol):
    name: str
    model: str | None
    key_env: str


def bounded(text: str, limit: int = MAX_DETAIL) -> str:
    """Server text made safe to print and store: no control characters, no lone surrogates, short."""
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_detail(response: httpx.Response) -> str:
    """The message of any of the error shapes above, else the start of the body."""
    try:
        body: Any = response.json()
    except ValueError:
        return bounded(response.text) or "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return bounded(str(error["message"]))
        if isinstance(error, str) and error:
            return bounded(error)
        if body.get("message"):
            return bounded(str(body["message"]))
        detail = body.get("detail")
        if isinstance(detail, str):
            return bounded(detail)
        if isinstance(detail, list):  # pydantic errors: "body.size: message"
            parts = [
                ".".join(str(p) for p in d.get("loc", ())) + ": " + str(d.get("msg", ""))
                for d in detail
                if isinstance(d, dict)
            ]
            return bounded("; ".join(parts))
    return bounded(response.text) or "(empty body)"


def check_reply(backend: _Backend, response: httpx.Response, base: str, path: str) -> None:
    """408/429/5xx ask for a retry (on the next endpoint); other errors end the call, explained."""
    status = response.status_code
    if status < 400:
        return
    detail = error_detail(response)
    if status in RETRYABLE_STATUS:
        raise RetryableError(f"HTTP {status}: {detail}", parse_retry_after(response))
    where = f"{backend.name}: {base}{path} answered HTTP {status}: {detail}"
    advice = _advice(backend, status, detail, path)
    raise BackendError(f"{where.rstrip('.')}. {advice}." if advice else where)


def _advice(backend: _Backend, status: int, detail: str, path: str) -> str:
    """The fix for the failures users meet; other 4xx keep the server's message alone."""
    lowered = detail.lower()
    if status in (401, 403):
        return (
            f"The server wants an API key: export {backend.key_env}=<the server's --api-key> "
            "(or name another variable in remote.api_key_env)"
        )
    if "model mismatch" in lowered or ("model" in lowered and "not found" in lowered):
        served = _SERVED.search(detail)
        which = f"'{served.group(1)}'" if served else "another model"
        return (
            f"This server serves {which}, not '{backend.model}': fix #MODEL in the generator spec, "
            "or leave it out to use whatever the server serves"
        )
    if path.endswith("/edits") and (status == 404 or any(s in lowered for s in _EDIT_REFUSALS)):
        return (
            "The served model cannot edit images (or this server has no /v1/images/edits): serve an "
            "edit model such as FLUX.2-klein or Qwen-Image-Edit-2511 with a vLLM-Omni or SGLang "
            "version that has the edits route"
        )
    if "size" in lowered and ("exceed" in lowered or "invalid" in lowered or "not allowed" in lowered):
        return (
            "The server refuses this image size: lower generation.width / generation.height, or start "
            "the server with a larger --max-generated-image-size"
        )
    if status == 404:
        return (
            f"No {path} here: give the server root or its /v1 URL, and check that it was started with "
            "'vllm serve MODEL --omni' or 'sglang serve'"
        )
    return ""
