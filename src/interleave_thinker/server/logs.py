"""Log lines of both services (`serve generator`, `serve vlm`) without a secret in them.

Why a filter on the handlers and not care at each call: the lines that carry what a client sent are
written by uvicorn, not by us. Its access log quotes the request target, query string included, and a
client may put its key there (``?api_key=...``, as some SDKs do for other services) or in the path; at
``--log-level trace`` it logs each request's headers, ``Authorization`` included. So every record that
reaches a handler of the service is cleaned once, whoever logged it: the query string of a request line
is replaced by ``?<redacted>``, a bearer token after ``Bearer`` by ``***``, and the service's own key by
``***`` wherever it stands (path, exception text).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import quote

REDACTED = "***"
QUERY_REDACTED = "?<redacted>"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",;)\]}]+")
_QUERY = re.compile(r"(/[^\s?'\"]*)\?[^\s'\"]*")
"""A query string after a path, up to the next space or quote: a request target in any log line."""


class RedactSecrets(logging.Filter):
    """Cleans every record it sees (see the module's docstring); never drops one."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        super().__init__()
        values = {s for s in secrets if s}
        self.secrets = sorted(values | {quote(s, safe="") for s in values}, key=len, reverse=True)

    def clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return _QUERY.sub(lambda m: m.group(1) + QUERY_REDACTED, _BEARER.sub(r"\1" + REDACTED, text))

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(
            record.args, tuple
        ):  # cleaned one by one: formatters (uvicorn's access log) unpack them
            record.args = tuple(self._clean_arg(arg) for arg in record.args)
        message = record.getMessage()
        cleaned = self.clean(message)
        if cleaned != message:  # in the format itself, or across arguments
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.clean(record.exc_text)
        if record.stack_info:
            record.stack_info = self.clean(record.stack_info)
        return True

    def _clean_arg(self, arg: object) -> object:
        if isinstance(arg, int | float) or arg is None:
            return arg
        text = str(arg)
        cleaned = self.clean(text)
        return arg if cleaned == text else cleaned


def redact_logs(secret: str | None) -> RedactSecrets:
    """Clean every record of the service's log handlers (root's and uvicorn's, as configured by now:
    call it after ``uvicorn.Config``) and of uvicorn's loggers; ``secret`` is the service's key."""
    redact = RedactSecrets([secret])
    loggers = [logging.getLogger(name) for name in ("", "interleave_thinker", *UVICORN_LOGGERS)]
    for holder in [*loggers, *(h for logger in loggers for h in logger.handlers)]:
        for old in [f for f in holder.filters if isinstance(f, RedactSecrets)]:
            holder.removeFilter(old)  # a second service in one process: its key, not both
        holder.addFilter(redact)
    return redact
