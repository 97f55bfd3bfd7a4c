"""Reading TRL-style completions and dataset columns, whatever shape they arrive in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def completion_text(completion: Any) -> str:
    """A completion as text: a string, or TRL's conversational ``[{"role": "assistant", "content": ...}]``."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(completion_text(m) for m in completion)
    if isinstance(completion, dict):
        content = completion.get("content", completion.get("text", ""))
        if isinstance(content, list):
            return "".join(
                p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"
            )
        return str(content)
    return str(completion)


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


@dataclass(frozen=True)
class GroundTruth:
    """The recorded attempt's label and judge scores (``ground_truth`` or ``evaluation`` column)."""

    success: bool
    semantics: float
    quality: float

    @classmethod
    def parse(cls, value: Any) -> GroundTruth:
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, dict):
            raise ValueError(f"ground_truth must be a mapping with success/semantics/quality, got {value!r}")
        return cls(
            _as_bool(value["success"]), float(value.get("semantics", 0.0)), float(value.get("quality", 0.0))
        )


def column(columns: dict[str, Any], name: str, n: int, *aliases: str) -> list[Any]:
    for key in (name, *aliases):
        if key in columns and columns[key] is not None:
            values = list(columns[key])
            if len(values) != n:
                raise ValueError(f"column '{key}' has {len(values)} values for {n} completions")
            return values
    raise KeyError(f"reward needs the column '{name}' (aliases: {', '.join(aliases) or 'none'})")
