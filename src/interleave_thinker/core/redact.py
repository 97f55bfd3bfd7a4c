"""Credentials written inside a URL (``http://user:PASSWORD@host``) never leave the process in clear.

Why here, in core: a backend spec is a user's string, and it is shown and recorded in many places (the
trace's ``backends``, ``index.html``, ``document.md``, a batch's settings, a judge's ``run.json``, error
lines on stderr). Every one of them goes through :func:`redact_spec` or :func:`redact_credentials`, so
one rule decides what a URL's user-info becomes (``***``), and the layers above need not know URLs.
The backends themselves take the user-info out of their endpoint URLs and send it as a header
(``backends.remote.split_credentials``), so the password is then only a known secret to scrub.

>>> redact_spec("openai:http://alice:s3cret@10.0.0.2:8000/v1#m")
'openai:http://***@10.0.0.2:8000/v1#m'
>>> redact_spec("vllm-omni:bob:pw@gpu1:8000,gpu2:8000")
'vllm-omni:***@gpu1:8000,gpu2:8000'
>>> redact_spec("http:@hosts.txt#klein"), redact_spec("http:TOKEN@gpu1:8011")
('http:@hosts.txt#klein', 'http:***@gpu1:8011')
"""

from __future__ import annotations

import re

MASK = "***"

_SCHEME_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@]+@")
"""``scheme://anything-but-a-path@``: the user-info of a URL written with its scheme."""
_BARE_USERINFO = re.compile(r"(?<![^\s,:'\"(=\[<])[^\s/?#@,:'\"]+:[^\s/?#@,:'\"]+@(?=[\w\[])")
"""``user:password@host`` without a scheme (``host:port`` endpoints may be written so), after a start,
a space, a quote, ``,`` or ``:``; a bare ``user@host`` (an e-mail address) is left as it is."""
_SPEC_ITEM_USERINFO = re.compile(r"(?:^|(?<=,))[^\s/?#@,]+@")
"""In a spec's target, an endpoint item that starts with ``user-info@`` (``http:TOKEN@host:8011``)."""


def redact_credentials(text: str) -> str:
    """``text`` with the user-info of every URL in it replaced by ``***``.

    >>> redact_credentials("HTTP 502 from http://u:p@h:1/v1/chat and alice:pw@h2:8000")
    'HTTP 502 from http://***@h:1/v1/chat and ***@h2:8000'
    """
    if "@" not in text:
        return text
    return _BARE_USERINFO.sub(MASK + "@", _SCHEME_USERINFO.sub(lambda m: m[1] + MASK + "@", text))


def redact_spec(spec: str) -> str:
    """A backend spec (``KIND:TARGET``) as it may be shown and recorded: its kind kept, the user-info
    of its URLs replaced by ``***``."""
    kind, sep, target = spec.partition(":")
    if not sep:
        return redact_credentials(spec)
    return kind + sep + _SPEC_ITEM_USERINFO.sub(MASK + "@", redact_credentials(target))
