"""Reply skeletons: each request shape the product asks of a model, and the reply format it expects, as
fixed text with the values left open (the tiny stand-ins' format-constrained decoding reads them).

Why: the tiny stand-in models (``tiny/``) were format-trained on the planner's, critic's and judge's
released formats only; a request of another shape (the ranking, the sequence review, the GRPO reward's
text-first judgement, a benchmark judge's protocol) would get a reply no parser reads, so offline the
product could only show its failure path. Instead of training the tiny models on every format (minutes
of CPU in every rebuild), the module that writes a request registers how to recognise it and the skeleton
of a valid reply; a tiny model then picks only the values (:class:`Choice`), the skeleton's text being
imposed by its decoding. A served or full-size model never sees this: the registry is read by the tiny
kind only. The values mean nothing, so every page made with a tiny model says it is a stand-in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interleave_thinker.backends.protocols import Message


@dataclass(frozen=True)
class Choice:
    """One value of a reply: the model picks one of ``options`` (each a piece of reply text)."""

    options: tuple[str, ...]


Skeleton = tuple[str | Choice, ...]
"""A reply: fixed text and the values the model picks, in order."""


@dataclass(frozen=True)
class ReplyFormat:
    """A request shape and its reply: ``skeleton(messages)`` is the reply's skeleton for a request of
    this shape, None for any other request."""

    name: str
    skeleton: Callable[[list[Message]], Skeleton | None]


_FORMATS: dict[str, ReplyFormat] = {}


def register_format(name: str, skeleton: Callable[[list[Message]], Skeleton | None]) -> None:
    """Register (or replace) the format ``name``: the module that writes the request calls this once."""
    _FORMATS[name] = ReplyFormat(name, skeleton)


def registered_formats() -> tuple[str, ...]:
    return tuple(_FORMATS)


def skeleton_for(messages: list[Message]) -> tuple[str, Skeleton] | None:
    """The first registered format whose shape the request has, and its reply skeleton; None when none."""
    for fmt in _FORMATS.values():
        skeleton = fmt.skeleton(messages)
        if skeleton is not None:
            return fmt.name, skeleton
    return None


def parts(messages: list[Message]) -> list[dict[str, Any]]:
    """Every content part of every message, in order (a string content as one text part)."""
    found: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            found.append({"type": "text", "text": content})
        elif isinstance(content, list):
            found.extend(p for p in content if isinstance(p, dict))
    return found


def texts(messages: list[Message]) -> str:
    """The request's text parts joined by newlines."""
    return "\n".join(str(p.get("text", "")) for p in parts(messages) if p.get("type") == "text")


def kinds(messages: list[Message]) -> str:
    """The parts' kinds in order, one letter each: ``t`` text, ``i`` image (``"tii"``: text, two images)."""
    return "".join("t" if p.get("type") == "text" else "i" for p in parts(messages))


def scores(low: int = 0, high: int = 10) -> Choice:
    """A whole score from ``low`` to ``high``."""
    return Choice(tuple(str(n) for n in range(low, high + 1)))
