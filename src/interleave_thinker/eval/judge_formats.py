"""The benchmark judges' reply formats, for the tiny stand-in judges (``agents/reply_formats.py``).

A protocol registers the skeleton of its judge's reply and how its requests are known, so that
``--judge tiny:judge`` answers it offline in its format (``tiny/formats.py``): by the pinned digest of its
system text (no benchmark text copied here), or, when its scorer is made, by its loaded prompts' fixed text.
A served judge never reads these.
"""

from __future__ import annotations

from typing import Any

from interleave_thinker.agents.reply_formats import Skeleton, parts, register_format, texts
from interleave_thinker.backends.protocols import Message
from interleave_thinker.core.pinned_texts import sha256_text


def register_system_format(name: str, system_sha256: str, skeleton: Skeleton) -> None:
    """A protocol whose requests open with the system text of SHA-256 ``system_sha256`` is answered in
    ``skeleton`` by a tiny stand-in judge (``agents/reply_formats.py``): the protocol is known by its pinned
    digest, so no benchmark text is copied here."""

    def match(messages: list[Message]) -> Skeleton | None:
        first = messages[0] if messages else {}
        if first.get("role") != "system" or sha256_text(texts([first])) != system_sha256:
            return None
        return skeleton

    register_format(name, match)


MIN_PREFIX_CHARS = 20
"""A prompt is known by its text up to its first placeholder only when that much is fixed."""


def register_prompt_format(name: str, prompts: Any, skeleton: Skeleton) -> None:
    """Requests built from ``prompts`` (a protocol's loaded :class:`~interleave_thinker.eval.prompts.PromptSet`)
    are answered in ``skeleton`` by a tiny stand-in judge (``agents/reply_formats.py``): a request is known by
    a text part that opens with a prompt's fixed text (up to its first placeholder). Called when the
    protocol's scorer is made, with the texts it will fill."""
    heads = tuple(
        head for text in prompts.texts.values() if len(head := text.split("{", 1)[0]) >= MIN_PREFIX_CHARS
    )

    def match(messages: list[Message]) -> Skeleton | None:
        found = any(
            str(part.get("text", "")).startswith(heads)
            for part in parts(messages)
            if part.get("type") == "text"
        )
        return skeleton if found else None

    register_format(name, match)
