"""What differs between two settings records, one line per setting, for refusals that must say why.

Why one function: every command that keeps a settings record beside its outputs (``batch.json`` of
``batch`` and ``eval generate``) refuses to continue with other settings, and a refusal is only useful
when it names each setting that differs, with the recorded and the given value. Values are shown
bounded and scrubbed: keys are never part of a settings record, but a backend spec may carry a URL
with a password or an API key parameter, and a refusal is printed to the terminal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

MAX_VALUE_CHARS = 80
"""Longest value shown; longer ones are cut with an ellipsis."""
MAX_LINES = 20
"""Most differences listed; the rest are counted."""
MISSING = "(not set)"
_ABSENT = object()
SECRET_NAME = re.compile(r"(?i)(api[_-]?key|token|secret|password|authorization)")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^@/\s]+@")
_QUERY_SECRET = re.compile(r"(?i)([?&](?:key|api_key|access_token|token)=)[^&\s\"'#]+")


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"loop": {"max_attempts": 3}}`` -> ``{"loop.max_attempts": 3}`` (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def shown(key: str, value: Any) -> str:
    """One value as a refusal shows it: JSON, secrets masked, at most :data:`MAX_VALUE_CHARS` characters.

    >>> shown("planner", "openai:https://user:pw@host/v1?key=sk-1#m")
    '"openai:https://user:***@host/v1?key=***#m"'
    """
    if value is _ABSENT:
        return MISSING
    if SECRET_NAME.search(key.rsplit(".", 1)[-1]) and value:
        return '"***"'
    text = json.dumps(value, ensure_ascii=False, default=str)
    text = _QUERY_SECRET.sub(lambda m: f"{m[1]}***", _URL_PASSWORD.sub(lambda m: f"{m[1]}:***@", text))
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def setting_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per differing setting, ``dotted.key: OLD -> NEW`` in key order (bounded in count).

    >>> setting_differences({"loop": {"seed_base": 7}, "planner": "a"}, {"loop": {"seed_base": 8}, "planner": "a"})
    ['loop.seed_base: 7 -> 8']
    """
    before, after = flatten(old), flatten(new)
    lines = [
        f"{key}: {shown(key, before.get(key, _ABSENT))} -> {shown(key, after.get(key, _ABSENT))}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key, _ABSENT) != after.get(key, _ABSENT)
    ]
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], f"... and {len(lines) - MAX_LINES} more"]
    return lines
