"""One cleaning step for every string that comes from a model or a user before it is stored.

A Python ``str`` can hold what no file can: lone UTF-16 surrogates (a reply cut inside an escaped
emoji, ``\\ud83d`` decoded by a JSON client; a command-line argument with undecodable bytes), and
control characters such as NUL that break file names, terminals and many JSON readers. Such a string
makes ``trace.json`` unwritable, so it is cleaned where it enters: adjacent surrogate halves are
joined into their character, lone ones become U+FFFD, and C0 controls other than tab, newline and
carriage return are removed. Clean text (the common case) is returned unchanged after an encode
and a byte scan, both at C speed.
"""

from __future__ import annotations

import re
from itertools import islice

REPLACEMENT = "\ufffd"
MANY_SURROGATES = 1_000
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])


def _join_surrogates(text: str, first: int) -> str:
    """Adjacent halves become their character and lone ones U+FFFD; past :data:`MANY_SURROGATES`
    (a garbage reply) every half becomes ``?`` instead, at C speed, so the cost stays linear."""
    found = [m.start() for m in islice(_SURROGATE.finditer(text, first), MANY_SURROGATES + 1)]
    if len(found) > MANY_SURROGATES:
        return text.encode("utf-8", "replace").decode("utf-8")  # each surrogate -> "?"
    pieces: list[str] = []
    pos = 0
    for at in found:
        if at < pos:
            continue  # the low half of a pair already joined
        pieces.append(text[pos:at])
        high, low = ord(text[at]), ord(text[at + 1]) if at + 1 < len(text) else 0
        if 0xD800 <= high <= 0xDBFF and 0xDC00 <= low <= 0xDFFF:
            pieces.append(chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)))
            pos = at + 2
        else:
            pieces.append(REPLACEMENT)
            pos = at + 1
    pieces.append(text[pos:])
    return "".join(pieces)


def clean_text(text: str, *, keep_controls: bool = False) -> str:
    """``text`` with surrogates joined or replaced and control characters (except ``\\t\\n\\r``) removed
    (kept with ``keep_controls``: a reader that must not see ``tr\\x00ue`` as ``true`` cleans its values after reading).

    >>> clean_text("smile \\ud83d") == "smile \\ufffd"
    True
    >>> clean_text("a\\x00b\\tc")
    'ab\\tc'
    """
    try:
        data = text.encode("utf-8")  # C speed; only surrogates make it fail
    except UnicodeEncodeError as exc:
        text = _join_surrogates(text, exc.start)
        data = text.encode("utf-8")
    # control bytes never occur inside a multi-byte UTF-8 sequence, so a byte scan finds them all
    if not keep_controls and len(data.translate(None, _CONTROL_BYTES)) != len(data):
        text = _CONTROL.sub("", text)
    return text


def is_clean(text: str) -> bool:
    """True when ``text`` can be written as UTF-8 and holds no stray control character."""
    return _SURROGATE.search(text) is None and _CONTROL.search(text) is None
