"""The models' reply format, read and written: ``<think>...</think><answer>{...}</answer>``.

Reading. The released models answer with a Python-literal-like dict (single quotes, ``None``,
trailing commas, sometimes truncated) inside ``<answer>`` tags. The answer is read by
:mod:`interleave_thinker.core.literal` (strict JSON first, then the models' dialect with only their
known slips repaired); nothing is ever evaluated. Every reply is bounded and cleaned at this boundary:
over :data:`MAX_REPLY_CHARS` it is rejected, lone surrogates and control characters are cleaned
(:func:`~interleave_thinker.core.sanitize.clean_text`), so an accepted value can always be written as
JSON. Tags are found with plain ``bytes.find`` scans, so a reply is split in linear time. Only
:class:`ParseError` leaves these functions.

Writing is the inverse, for scripted backends, training data and tests: :func:`write_reply` lays a
reply out as the models do and :func:`literal` writes the answer as a Python literal. A string is
written so that the reader gives it back exactly: its quote, backslashes, line breaks and every ``<``
escaped (``\\x3c``, so no text inside the answer can look like a closing tag).
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from typing import Any

from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.literal import ReadResult, read_literal
from interleave_thinker.core.sanitize import clean_text, is_clean

MAX_REPLY_CHARS = 1_048_576
"""Longest reply read (characters); the agents ask for at most a few thousand tokens."""

_THINK_BLOCK = re.compile(b"<think>.*?</think>", re.IGNORECASE | re.DOTALL)

_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 60
_SHOW.maxlist = _SHOW.maxdict = 4
_SHOW.maxlevel = 2


def show(value: Any) -> str:
    """A short repr for error messages (a reply's value can be a megabyte long)."""
    return _SHOW.repr(value)


# -- reading ------------------------------------------------------------------------------------------


def prepare_reply(reply: str, *, keep_controls: bool = False) -> str:
    """The reply, cleaned; :class:`ParseError` when it is not text or longer than :data:`MAX_REPLY_CHARS`.

    ``keep_controls``: the text an answer is read from keeps its control characters, so that ``tr\\x00ue``
    stays a mangled word (refused) instead of becoming ``true``; :func:`read_answer` cleans the values."""
    if not isinstance(reply, str):
        raise ParseError(f"the reply is a {type(reply).__name__}, not text", raw="")
    if len(reply) > MAX_REPLY_CHARS:
        raise ParseError(
            f"the reply has {len(reply)} characters, over the limit of {MAX_REPLY_CHARS}",
            raw=clean_text(reply[:MAX_REPLY_CHARS]),
        )
    return clean_text(reply, keep_controls=keep_controls)


_Folded = tuple[bytes, bytes]


def _folded(reply: str) -> _Folded:
    """The reply as UTF-8 and its ASCII-lowercased copy (same offsets): tags are found with ``bytes.find``.

    ``bytes.lower`` folds only ASCII letters, so offsets agree between the two; every search is a C
    scan and the pieces are decoded once, so any reply is split in linear time.
    """
    data = reply.encode("utf-8", "surrogatepass")
    return data, data.lower()


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def extract_think(reply: str, folded: _Folded | None = None) -> str | None:
    """The text of the first closed ``<think>`` block, or None."""
    data, low = folded or _folded(reply)
    opening = low.find(b"<think>")
    closing = low.find(b"</think>", opening + len(b"<think>")) if opening >= 0 else -1
    if closing < 0:
        return None
    return _decode(data[opening + len(b"<think>") : closing]).strip()


def _without_think(data: bytes, low: bytes) -> bytes:
    """The reply without its closed think blocks, and cut at a think block that never closes.

    Everything up to the last ``</think>`` is cleaned by one substitution (each block there has a
    closing tag after it, so the lazy match is linear); an opening tag after it runs to the end.
    """
    last = low.rfind(b"</think>")
    split = last + len(b"</think>") if last >= 0 else 0
    head = _THINK_BLOCK.sub(b"", data[:split]) if split else b""
    opening = low.find(b"<think>", split)
    return head + data[split : opening if opening >= 0 else len(data)]


def extract_answer(reply: str, folded: _Folded | None = None) -> str:
    """The text inside ``<answer>...</answer>``; after an unclosed ``<answer>``; else the reply without its think block."""
    data, low = folded or _folded(reply)
    opening = low.find(b"<answer>")
    if opening < 0:
        return _decode(_without_think(data, low)).strip()
    closing = low.find(b"</answer>", opening + len(b"<answer>"))
    return _decode(data[opening + len(b"<answer>") : closing if closing >= 0 else len(data)]).strip()


def read_answer(text: str, *, raw: str, lenient: bool = False) -> ReadResult:
    """The dict or list starting at the first ``{`` or ``[`` of ``text``, read by the literal reader
    (``lenient``: with json_repair's further slips, as the rewards read; :func:`~.literal.read_literal`)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError("the reply holds no JSON object or list", raw=raw)
    result = read_literal(text[start:], raw=raw, lenient=lenient)
    if not result.value:
        raise ParseError("the answer is empty", raw=raw)
    _clean_in_place(result.value)
    return result


def _clean_in_place(value: Any) -> None:
    """Every string of an answer (keys too) cleaned, containers kept (``ReadResult.cut`` holds their ids).

    The answer is read from text that kept its control characters (a boolean cut by one is refused, as
    the release's ``json_repair`` reads it as a string), so its strings are cleaned here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            for i, element in enumerate(item):
                if isinstance(element, str):
                    item[i] = clean_text(element)
                else:
                    stack.append(element)
        elif isinstance(item, dict):
            pairs = [(clean_text(k) if isinstance(k, str) else k, v) for k, v in item.items()]
            item.clear()
            for key, element in pairs:
                item[key] = clean_text(element) if isinstance(element, str) else element
                stack.append(element)


def repair_literal(text: str, *, raw: str) -> Any:
    """Parse a JSON-or-Python-literal-like text into plain Python objects, repairing only known slips."""
    return read_answer(text, raw=raw).value


@dataclass(frozen=True)
class Reply:
    """A tagged reply, read: the cleaned text (what errors carry), the answer's value and the thought."""

    text: str
    answer: Any
    reasoning: str | None


def read_reply(reply: str) -> Reply:
    """Bound and clean ``reply``, then read its answer and its ``<think>`` text (planner and critic)."""
    source = prepare_reply(reply, keep_controls=True)
    text = clean_text(source)  # surrogates already joined: a byte scan
    answer = repair_literal(extract_answer(source), raw=text)
    return Reply(text, answer, extract_think(text))


def answer_dict(reply: Reply) -> dict[Any, Any]:
    """The answer of a reply that must hold one dict (a one-item list around it is unwrapped, as the
    models sometimes write it); :class:`ParseError` for anything else (critic and ranking)."""
    value = reply.answer
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        raise ParseError(f"the answer is a {type(value).__name__}, not a dict", raw=reply.text)
    return value


# -- writing ------------------------------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "<": "\\x3c"}
_QUOTED = {q: str.maketrans({**_ESCAPES, q: "\\" + q}) for q in ("'", '"')}


def check_text(text: str, what: str) -> str:
    """``text`` when a parser can give it back (clean); else ``ValueError`` naming ``what``."""
    if not is_clean(text):
        raise ValueError(f"{what} holds a control character or a lone surrogate, which parsing removes")
    return text


def literal(value: Any) -> str:
    """``value`` (None, bool, int, str, list, dict with str keys) as the models write it: a Python literal.

    A string is quoted as ``repr`` quotes it (double quotes when it holds only single ones) and escaped
    so that :mod:`~interleave_thinker.core.literal` reads it back unchanged.
    """
    if value is None or isinstance(value, bool | int):
        return repr(value)
    if isinstance(value, str):
        quote = '"' if "'" in value and '"' not in value else "'"
        return quote + value.translate(_QUOTED[quote]) + quote
    if isinstance(value, list):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(str(k))}: {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write a {type(value).__name__} into a reply")


def write_reply(answer: Any, reasoning: str | None) -> str:
    """``<think>`` (when there is a thought) then ``<answer>``, one tag a line, as the released models write.

    The thought must be what :func:`extract_think` gives back: clean, without surrounding space, and
    without a ``</think>`` or ``<answer>`` tag of its own; otherwise ``ValueError``.
    """
    body = f"<answer>\n{literal(answer)}\n</answer>"
    if reasoning is None:
        return body
    check_text(reasoning, "the reasoning")
    folded = reasoning.encode("utf-8").lower()
    if reasoning != reasoning.strip() or b"</think>" in folded or b"<answer>" in folded:
        raise ValueError(
            "the reasoning must have no surrounding space and no </think> or <answer> tag: "
            f"{show(reasoning)} would not read back as written"
        )
    return f"<think>\n{reasoning}\n</think>\n{body}"
