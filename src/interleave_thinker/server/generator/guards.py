"""The checks every route makes before parsing: the bearer token and a bounded body."""

from __future__ import annotations

import hmac

from fastapi import Request
from starlette.requests import ClientDisconnect

from interleave_thinker.server.generator.protocol import RequestError


def check_token(request: Request, api_key: str | None) -> None:
    """401 unless the request carries ``Authorization: Bearer <the service's token>``."""
    if api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise RequestError(
            401,
            "Missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the "
            "service reads from its --api-key-env variable.",
            {"WWW-Authenticate": "Bearer"},
        )


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
