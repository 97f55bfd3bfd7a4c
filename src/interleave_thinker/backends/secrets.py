"""The one secret scrubber every remote backend passes its error messages through.

Why one place: a server that echoes the request's headers in its error body (proxies, debug servers,
some gateways do) would otherwise carry the API key into the error message, and from there into
``trace.json``, ``index.html``, ``document.md``, logs and stderr. Two layers: the known key values are
replaced wherever they appear, and the value of anything that looks like an auth header or an API key
parameter is replaced too, so a key we were not told about does not leak either.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

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


def split_credentials(url: str) -> tuple[str, str | None]:
    """``scheme://user:password@host/...`` -> (the URL without its user-info, the ``Authorization:
    Basic`` value those credentials stand for); (``url``, None) when it has none.

    Why: a URL's user-info would otherwise be shown wherever the URL is (errors, traces, stderr), and
    aiohttp refuses a URL with credentials beside an ``Authorization`` header. Taken out here, the
    password is only a header value, which every error is scrubbed of.

    >>> split_credentials("http://alice:pa%40ss@10.0.0.2:8000/v1")
    ('http://10.0.0.2:8000/v1', 'Basic YWxpY2U6cGFAc3M=')
    """
    if "://" not in url or "@" not in url:
        return url, None
    try:
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url, None
    except ValueError:
        return url, None
    clean = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return clean, "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


def credential_secrets(authorizations: Iterable[str]) -> list[str]:
    """What to scrub for ``Basic`` values made by :func:`split_credentials`: each value, its token, and
    its password on its own (when long enough not to mask ordinary words)."""
    found: list[str] = []
    for value in authorizations:
        found += header_secrets({"Authorization": value})
        password = base64.b64decode(value.partition(" ")[2]).decode("utf-8").partition(":")[2]
        if len(password) >= 4:
            found.append(password)
    return found
