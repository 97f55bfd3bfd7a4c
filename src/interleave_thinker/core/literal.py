"""Read the dict/list answers the released models write, tolerating only the slips they make.

The models answer with a Python-literal-like dict. Valid JSON is read by :func:`json.loads` first
(C speed); everything else goes through this reader, which accepts exactly:

- objects ``{key: value, ...}`` and lists ``[value, ...]``, a trailing comma allowed;
- keys that are quoted strings or bare identifiers (``{score: 7}``); a key given twice is an error;
- strings in single or double quotes, with JSON and Python escapes; a quote inside a string counts
  as the closing one only when a ``,`` ``:`` ``}`` ``]`` or the end of the text follows it, so
  ``'the cat's tail'`` reads as the model meant;
- ``True``/``False``/``None`` and ``true``/``false``/``null`` in any case (``TRUE``, ``Null``: the
  release's ``json_repair`` reads them so); plain decimal numbers (at most 40 characters);
- a text cut short (the reply hit its token limit): open strings and containers are closed, and the
  last item is dropped when the end falls inside it (a number or an unfinished word touching the end,
  a key without its value, a bracket with nothing after it), because its value is unknown. Containers closed this way are reported in ``cut``.

With ``lenient=True`` (the rewards, which score as the release's ``json_repair`` 0.64.4 reads) three slips
more are read as ``json_repair`` reads them: a key given twice keeps its last value; ``#``, ``//`` and
``/* */`` comments between items are skipped; words or numbers after a constant or number, up to the next
delimiter, are ignored (``True and False`` is ``True``).

Anything else is an error, never a guess: ``True and False`` (unless lenient), ``-True``, ``{"score"-1: [7, 4]}``,
unquoted words as values, more values after the first (``{...}, {...}``). Nesting is capped at 32 levels and the
work at 5,000 values, quotes and escapes (an answer holds a few dozen), so every answer is read in
linear time, without recursion, in milliseconds: ``json.loads`` is tried only when the text holds at
most 20,000 separators, the reader takes one regular-expression step per token or string.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from interleave_thinker.core.errors import ParseError

MAX_DEPTH = 32
MAX_WORK = 5_000
MAX_JSON_VALUES = 20_000
MAX_NUMBER_CHARS = 40
CONSTANTS: dict[str, Any] = {
    "True": True,
    "False": False,
    "None": None,
    "true": True,
    "false": False,
    "null": None,
}

_ANY_CASE: dict[str, Any] = {"true": True, "false": False, "null": None}
"""JSON's constants in any case (``TRUE``, ``Null``), as ``json_repair`` reads them; ``None`` only as written."""

_SPACE = re.compile(r"\s*")
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BODY = {q: re.compile(rf"[^{q}\\]*(?:\\.[^{q}\\]*)*", re.DOTALL) for q in ("'", '"')}
_STRING_END = re.compile(r"\s*(?:[,:}\]]|\Z)")
_TRAILING_WORDS = re.compile(r"(?:[ \t\r\n]+(?:[A-Za-z_][A-Za-z0-9_]*|-?[0-9][0-9.]*))+(?=\s*(?:[,}\]]|\Z))")
"""Lenient: the words or numbers after a scalar, up to the next delimiter (``True and False``)."""
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)", re.DOTALL)
_PARTIAL_ESCAPE = re.compile(r"(?:u[0-9a-fA-F]{0,3}|x[0-9a-fA-F]?)?")
_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
    "/": "/",
    "\\": "\\",
    "'": "'",
    '"': '"',
}
_MISSING = object()
"""What a value cut by the end of the text reads as: the item holding it is dropped."""


@dataclass
class ReadResult:
    value: Any
    cut: set[int] = field(default_factory=set)
    """``id()`` of every container that the end of the text closed (the reply was cut short)."""


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _structure(text: str) -> int:
    """An upper bound of the values in ``text`` (separators and openings, also those inside strings)."""
    return sum(text.count(c) for c in ",:[{")


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if len(code) > 1:
        return chr(int(code[1:], 16))
    return _SIMPLE_ESCAPES.get(code, "\\" + code)


def _drop_partial_escape(body: str) -> str:
    """A string cut inside an escape (``\\``, ``\\u12``) loses the unfinished escape."""
    last = body.rfind("\\", max(0, len(body) - 6))
    if last < 0 or not _PARTIAL_ESCAPE.fullmatch(body, last + 1):
        return body
    first = last
    while first > 0 and body[first - 1] == "\\":
        first -= 1
    return body[:last] if (last - first) % 2 == 0 else body


class _Reader:
    def __init__(self, text: str, raw: str, lenient: bool = False) -> None:
        self.text, self.raw, self.pos, self.work = text, raw, 0, 0
        self.lenient = lenient
        self.cut: set[int] = set()

    def fail(self, problem: str) -> ParseError:
        return ParseError(
            f"the answer is not a valid literal at character {self.pos}: {problem}", raw=self.raw
        )

    def spend(self, units: int) -> None:
        self.work += units
        if self.work > MAX_WORK:
            raise self.fail(f"more than {MAX_WORK} values and escapes; the answer is far too long")

    def peek(self) -> str:
        """The next non-space character ('' at the end), leaving the position on it."""
        char = self.text[self.pos : self.pos + 1]
        if char.isspace():
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            char = self.text[self.pos : self.pos + 1]
        while self.lenient and (char == "#" or self.text.startswith(("//", "/*"), self.pos)):
            self.spend(1)  # a comment, skipped as json_repair skips it: to the line's end, or to */
            closing = "*/" if self.text.startswith("/*", self.pos) else "\n"
            end = self.text.find(closing, self.pos + 2 if closing == "*/" else self.pos)
            self.pos = len(self.text) if end < 0 else end + len(closing)
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            char = self.text[self.pos : self.pos + 1]
        return char

    def value(self, depth: int) -> Any:
        char = self.peek()
        self.spend(1)
        if char == "":
            return _MISSING
        if char in "{[":
            if depth >= MAX_DEPTH:
                raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
            self.pos += 1
            opened = self.pos
            container = self.obj(depth + 1) if char == "{" else self.arr(depth + 1)
            if id(container) in self.cut and not self.text[opened:].strip():
                return _MISSING  # opened just before the end: an item not begun is no item
            return container
        if char in "'\"":
            return self.string(char)[0]
        return self.scalar()

    def scalar(self) -> Any:
        start = self.pos
        match = _NUMBER.match(self.text, start) or _WORD.match(self.text, start)
        if match is None:
            raise self.fail(f"unexpected {self.text[start : start + 10]!r}")
        token, self.pos = match.group(), match.end()
        constant = CONSTANTS.get(token, _ANY_CASE.get(token.lower(), _MISSING))
        if self.lenient and (constant is not _MISSING or not _WORD.fullmatch(token)):
            trailing = _TRAILING_WORDS.match(self.text, self.pos)
            if trailing is not None:  # json_repair keeps the first value and drops the rest
                self.spend(1)
                self.pos = trailing.end()
                if constant is _MISSING:
                    return self._number(token)
        if constant is not _MISSING:
            return constant  # complete even at the end: no other value starts with it
        if self.pos == len(self.text):
            return _MISSING  # a number or word cut by the end: its last characters may be missing
        if _WORD.fullmatch(token):
            raise self.fail(f"unquoted word {token[:40]!r} where a value belongs")
        return self._number(token)

    def _number(self, token: str) -> int | float:
        if len(token) > MAX_NUMBER_CHARS:
            raise self.fail(f"a number of {len(token)} characters (at most {MAX_NUMBER_CHARS})")
        return float(token) if "." in token or "e" in token or "E" in token else int(token)

    def string(self, quote: str, *, key: bool = False) -> tuple[str, bool]:
        """The string starting at the quote under the position, and whether the end of the text cut it.

        A key ends at its first unescaped quote; a value at the first quote that a delimiter follows.
        """
        start = pos = self.pos + 1
        text = self.text
        while True:
            pos = _BODY[quote].match(text, pos).end()  # type: ignore[union-attr]
            if pos >= len(text) or text[pos] != quote:  # the end, or a lone backslash at the end
                self.pos = len(text)
                return self.decode(_drop_partial_escape(text[start:])), True
            if key or _STRING_END.match(text, pos + 1):
                self.pos = pos + 1
                return self.decode(text[start:pos]), False
            self.spend(1)  # a quote inside the string: bounded like any other piece of work
            pos += 1

    def decode(self, body: str) -> str:
        if "\\" not in body:
            return body
        self.spend(body.count("\\"))
        return _ESCAPE.sub(_unescape, body)

    def arr(self, depth: int) -> list[Any]:
        items: list[Any] = []
        while True:
            if self.peek() == "]":
                self.pos += 1
                return items
            item = self.value(depth)
            if item is _MISSING:
                self.cut.add(id(items))
                return items
            items.append(item)
            if self.closes(items, "]", "a list item"):
                return items

    def key(self) -> str | object:
        char = self.peek()
        self.spend(1)
        if char in ("'", '"'):
            key, cut = self.string(char, key=True)
            return _MISSING if cut else key
        match = _WORD.match(self.text, self.pos)
        if match is None or match.group() in CONSTANTS:
            raise self.fail(
                f"a key must be a quoted string or a name, got {self.text[self.pos : self.pos + 10]!r}"
            )
        self.pos = match.end()
        return _MISSING if self.pos == len(self.text) else match.group()

    def obj(self, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while True:
            char = self.peek()
            if char == "}":
                self.pos += 1
                return result
            key = _MISSING if char == "" else self.key()
            separator = "" if key is _MISSING else self.peek()
            if separator not in (":", ""):
                raise self.fail(f"expected ':' after the key {str(key)[:40]!r}, got {separator!r}")
            self.pos += 1
            item = _MISSING if separator == "" else self.value(depth)
            if item is _MISSING:
                self.cut.add(id(result))
                return result
            if key in result and not self.lenient:
                raise self.fail(f"the key {str(key)[:40]!r} is given twice")
            result[str(key)] = item
            if self.closes(result, "}", f"the value of {str(key)[:40]!r}"):
                return result

    def closes(self, container: list[Any] | dict[str, Any], close: str, after: str) -> bool:
        """After an item of ``container``: True when ``close`` ends it, or the reply ends there (the
        container is recorded as cut); False after a ``,``; anything else is an error."""
        char = self.peek()
        self.pos += 1
        if char == close:
            return True
        if char == "":
            self.cut.add(id(container))
            return True
        if char != ",":
            self.pos -= 1
            raise self.fail(f"expected ',' or {close!r} after {after}, got {char!r}")
        return False


def _read_json(text: str, raw: str, lenient: bool = False) -> tuple[Any, int] | None:
    """The strict-JSON value at the start of ``text`` and where it ends; None when it is not JSON."""
    if _structure(text) > MAX_JSON_VALUES:  # json costs per value: only when they are few
        return None
    try:
        hook = None if lenient else _unique_pairs  # lenient: a key given twice keeps its last value
        return json.JSONDecoder(object_pairs_hook=hook).raw_decode(text)  # one per call: threads
    except _DuplicateKey as exc:
        raise ParseError(f"the answer gives the key {str(exc)[:40]!r} twice", raw=raw) from None
    except (ValueError, RecursionError):
        return None  # not strict JSON: read it as the models' literal dialect


def read_literal(text: str, *, raw: str, lenient: bool = False) -> ReadResult:
    """Read the dict or list at the start of ``text``; :class:`ParseError` (with ``raw``) otherwise.

    ``lenient``: json_repair's three further slips too (the module's docstring)."""
    reader = _Reader(text, raw, lenient)
    if reader.peek() not in ("{", "["):
        raise reader.fail("the answer must start with '{' or '['")
    result = _read_json(text, raw, lenient)
    if result is not None:
        reader.pos = result[1]
        value, cut = result[0], set()
    else:
        if text.count("\\") > MAX_WORK:
            raise reader.fail(f"more than {MAX_WORK} escapes; the answer is far too long")
        value, cut = reader.value(0), reader.cut
        if value is _MISSING:
            raise ParseError("the answer is empty", raw=raw)
    if reader.peek() in (",", "{", "["):
        raise reader.fail("more values follow the first; the answer is ambiguous")
    return ReadResult(value, cut)
