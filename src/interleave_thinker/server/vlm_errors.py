"""The OpenAI-shaped error bodies of ``serve vlm``: one shape for the JSON replies (4xx, 500) and for a
streamed reply's error event, so OpenAI clients (and ours) show the message either way."""

from __future__ import annotations

from typing import Any

from interleave_thinker.core.errors import BackendError, InputError, RequestError

__all__ = ["RequestError", "error_body", "failure_body"]
"""``RequestError`` (``core/errors.py``, shared with ``serve generator``) becomes an OpenAI-shaped 4xx
(an error event once a streamed reply has started: an image whose pixels do not decode is found in the call)."""


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    """OpenAI's error shape (the message made encodable: it may quote a request's own text)."""
    message = message.encode("utf-8", "replace").decode("utf-8")
    return {"error": {"message": message, "type": kind, "code": status}}


def failure_body(exc: BaseException) -> dict[str, Any]:
    """A failed generation as an OpenAI error body: a 500 reply, or a streamed reply's error event; a 400
    for an :class:`InputError` (what the model's own processor refuses)."""
    if isinstance(exc, RequestError):
        return error_body(exc.status, str(exc), "invalid_request_error")
    if isinstance(exc, InputError):  # the model's processor refused the request: the client's to fix
        return error_body(400, str(exc), "invalid_request_error")
    if isinstance(exc, BackendError):
        return error_body(500, str(exc), "server_error")
    return error_body(500, f"The model failed: {type(exc).__name__}: {str(exc)[:300]}", "server_error")
