"""The one secret scrubber every remote backend passes its error messages through.

Why one place: a server that echoes the request's headers in its error body (proxies, debug servers,
some gateways do) would otherwise carry the API key into the error message, and from there into
``trace.json``, ``index.html``, ``document.md``, logs and stderr. Two layers: the known key values are
replaced wherever they appear, and the value of anything that looks like an auth header or an API key
parameter is replaced too, so a key we were not told about does not leak either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from interleave_thinker.core.redact import redact_credentials

MASK = "***"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-goog-api-key", "x-api-key", "api-key"})
"""Request headers whose values are secrets; their values are scrubbed as known secrets too."""

_HEADER_VALUE = re.compile(
    r"""(?ix)
    (\b(?:proxy-)?authorization|\bx-goog-api-key|\bx-api-key|\bapi[-_]key)   # the name
    (\\?["']?\s*[:=,]\s*\\?["']?)                                            # : or = with quotes
    ((?:bearer|basic|token)\s+)?                                              # an auth scheme
    ([^\s"'\\,;&}\])]+)                                                       # the value
    """
)
_QUERY_KEY = re.compile(r"(?i)([?&](?:key|api_key|access_token)=)[^&\s\"'#]+")
_MAX_CHAIN = 8


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret, every auth-header-like value and the user-info of every URL
    (:func:`~interleave_thinker.core.redact.redact_credentials`) replaced by ``***``.

    >>> scrub("HTTP 401: {'authorization': 'Bearer sk-abc'} sk-abc", ["sk-abc"])
    "HTTP 401: {'authorization': 'Bearer ***'} ***"
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _HEADER_VALUE.sub(lambda m: f"{m[1]}{m[2]}{m[3] or ''}{MASK}", text)
    return redact_credentials(_QUERY_KEY.sub(lambda m: f"{m[1]}{MASK}", text))


def header_secrets(headers: dict[str, str] | None) -> list[str]:
    """The values of the secret headers in ``headers``, with and without their auth scheme."""
    values: list[str] = []
    for name, value in (headers or {}).items():
        if name.lower() in SECRET_HEADERS and value:
            values.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                values.append(token.strip())
    return values


def leaks(exc: BaseException | None, secrets: Iterable[str | None]) -> bool:
    """Whether ``exc`` or any exception it chains to would show a secret when printed."""
    known = [s for s in secrets if s]
    seen = 0
    while exc is not None and seen < _MAX_CHAIN:
        text = f"{exc}"
        if scrub(text, known) != text:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False
