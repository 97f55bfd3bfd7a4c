"""The checks every route makes before its job is queued: the bearer token, a bounded body, the parse."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from interleave_thinker.core.errors import RequestError
from interleave_thinker.server.auth import UNAUTHORIZED, bearer_ok
from interleave_thinker.server.generator.protocol import EditJob


def check_token(request: Request, api_key: str | None) -> None:
    """401 unless the request carries ``Authorization: Bearer <the service's token>``."""
    if not bearer_ok(request.headers.get("authorization", ""), api_key):
        raise RequestError(401, UNAUTHORIZED, {"WWW-Authenticate": "Bearer"})


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` (header or bytes read)."""
    declared = request.headers.get("content-length", "")
    too_big = f"is over the limit of {limit} bytes (the service's --max-body-mb)"
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"The body of {declared} bytes {too_big}.")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"The body {too_big}.")
            chunks.append(chunk)
    except ClientDisconnect:
        raise RequestError(400, "The client closed the connection before sending the whole body.") from None
    return b"".join(chunks)


async def admit(
    request: Request, settings: Any, metrics: Any, parse: Callable[[bytes], Awaitable[EditJob]]
) -> EditJob:
    """Token, bounded body and the route's ``parse``: the checked job; a refusal is counted
    (``unauthorized`` for 401, else ``bad_request``) and raised."""
    try:
        check_token(request, settings.api_key)
        body = await read_body(request, settings.max_body_bytes)
        return await parse(body)
    except RequestError as exc:
        metrics.record("unauthorized" if exc.status == 401 else "bad_request")
        raise
