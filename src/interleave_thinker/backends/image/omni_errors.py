"""What a diffusion server's error reply means, in one message that says what to change.

vLLM-Omni raises FastAPI ``HTTPException``s that vLLM's app turns into
``{"error": {"message", "type", "param", "code"}}`` (older servers: ``{"object": "error", "message"}``
or FastAPI's own ``{"detail": ...}``; ``--api-key`` rejections: ``{"error": "Unauthorized"}``). The
messages we recognise come from its ``api_server.py``: "Model mismatch: request specifies 'X' but
server is running 'Y'.", "Requested image size WxH exceeds the maximum allowed size of N pixels.",
"Invalid size ...", and input-image limits of models that cannot edit. Reading the message out of those
shapes is :func:`interleave_thinker.backends.remote.error_message`; this module adds the fix.
"""

from __future__ import annotations

import re

_SERVED = re.compile(r"server is running '([^']{0,300})'")
_EDIT_REFUSALS = ("does not support image", "input image", "image input", "cannot edit", "not support edit")


def advice(key_env: str, model: str | None, status: int, detail: str, path: str) -> str:
    """The fix for the failures users meet; other 4xx keep the server's message alone."""
    lowered = detail.lower()
    if status in (401, 403):
        return (
            f"The server wants an API key: export {key_env}=<the server's --api-key> "
            "(or name another variable in remote.api_key_env)"
        )
    if "model mismatch" in lowered or ("model" in lowered and "not found" in lowered):
        served = _SERVED.search(detail)
        which = f"'{served.group(1)}'" if served else "another model"
        return (
            f"This server serves {which}, not '{model}': fix #MODEL in the generator spec, "
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
