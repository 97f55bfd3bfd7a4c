"""The bearer token both services share (`serve generator`, `serve vlm`): read once from the environment,
compared in constant time.

Why ``--api-key-env NAME`` and ``VLLM_API_KEY`` but no ``--api-key VALUE``: a value on the command line
is visible to every user of the machine (``ps``, ``/proc/PID/cmdline``) and lands in shell history and
job logs. vLLM reads ``VLLM_API_KEY`` when its ``--api-key`` is absent, so a vLLM user's environment
carries over unchanged; ``--api-key`` itself is accepted only to say so.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from typing import Any

from interleave_thinker.core.errors import ConfigError

UNAUTHORIZED = (
    "Missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the "
    "service reads from its --api-key-env variable (or VLLM_API_KEY)."
)
VLLM_KEY_VARIABLE = "VLLM_API_KEY"
"""Read when ``--api-key-env`` is not given, as vLLM reads it when ``--api-key`` is not given."""
"""The 401 message of both services: it names the fix and never the expected token."""


def api_key_from_env(name: str | None, *, refused_value: str | None = None) -> str | None:
    """The bearer token the service requires: from the variable named by ``--api-key-env``, else from
    ``VLLM_API_KEY`` when set, else none. ``refused_value`` is what ``--api-key`` was given: any value
    is refused (and never repeated in the message)."""
    if refused_value is not None:
        raise ConfigError(
            "--api-key takes no value here: a key on the command line shows in ps and shell history. "
            f"export {VLLM_KEY_VARIABLE}=<token> (read as vLLM reads it), or name another variable with "
            "--api-key-env NAME."
        )
    if not name:
        return os.environ.get(VLLM_KEY_VARIABLE, "").strip() or None
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(
            f"--api-key-env {name}: the environment variable {name} is empty; export {name}=<token>."
        )
    return value


def bearer_ok(authorization: str, api_key: str | None) -> bool:
    """Whether an ``Authorization`` header value carries ``Bearer <api_key>`` (always, with no key)."""
    if api_key is None:
        return True
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())


class BearerAuth:
    """ASGI middleware: ``reply()`` (a 401 app) for a request without the token, on every path but
    ``open_paths``; before the body is read, so an unauthenticated client cannot make the server parse."""

    def __init__(
        self, app: Any, api_key: str | None, reply: Callable[[], Any], open_paths: frozenset[str]
    ) -> None:
        self.app, self.api_key, self.reply, self.open_paths = app, api_key, reply, open_paths

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") not in self.open_paths:
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not bearer_ok(header.decode("latin-1"), self.api_key):
                await self.reply()(scope, receive, send)
                return
        await self.app(scope, receive, send)
