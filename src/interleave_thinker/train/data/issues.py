"""Validation problems that point at a file, a line and a field: ``FILE:LINE: field: problem``.

Why line numbers for JSON arrays: training files hold thousands of records, and "record 8123" is
useless in an editor. We find where each element starts by walking the text with the standard
decoder's ``raw_decode`` (no third-party parser, exact for any valid JSON).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from interleave_thinker.core.errors import InputError

PathPart = str | int
MAX_SHOWN = 20
"""How many problems an error message lists before it says how many more there are."""

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


@dataclass(frozen=True)
class Issue:
    """One problem in one file."""

    file: str
    line: int
    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.problem}"


class DatasetError(InputError):
    """A training-data file failed validation; :attr:`issues` lists every problem found, in order."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = list(issues)
        shown = [str(issue) for issue in self.issues[:MAX_SHOWN]]
        if len(self.issues) > MAX_SHOWN:
            shown.append(f"... and {len(self.issues) - MAX_SHOWN} more problem(s)")
        super().__init__("\n".join(shown))


def field_name(parts: Sequence[PathPart]) -> str:
    """``("messages", 1, "content")`` -> ``messages[1].content``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(record)"


class LineIndex:
    """Line numbers of offsets in one text: its newlines found once, each lookup a binary search.

    Why: a JSON array of 20,000 records with a problem in each had the newlines counted from the start of
    the file for every problem, quadratic in the file (51 s; issue 41, item 8)."""

    def __init__(self, text: str) -> None:
        self.newlines = [match.start() for match in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        """The 1-based line holding ``offset``: one more than the newlines before it."""
        return bisect_left(self.newlines, offset) + 1


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _children(text: str, pos: int) -> list[tuple[PathPart, int]]:
    """Keys (or indices) and start offsets of the direct children of the container at ``pos``."""
    opener = text[pos]
    pos = _skip(text, pos + 1)
    found: list[tuple[PathPart, int]] = []
    index = 0
    while pos < len(text) and text[pos] not in "]}":
        key: PathPart = index
        if opener == "{":
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, _skip(text, pos) + 1)  # past the colon
        found.append((key, pos))
        _, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
        index += 1
    return found


def element_offsets(text: str) -> list[int]:
    """Start offsets of the elements of the top-level JSON array in ``text`` (which must be valid)."""
    pos = _skip(text, 0)
    return [offset for _, offset in _children(text, pos)] if text[pos : pos + 1] == "[" else []


def locate(text: str, start: int, parts: Sequence[PathPart]) -> int:
    """Offset of the deepest existing element along ``parts`` below the value starting at ``start``."""
    pos = start
    for part in parts:
        if text[pos : pos + 1] not in ("{", "["):
            break
        children = dict(_children(text, pos))
        if part not in children:
            break
        pos = children[part]
    return pos
