"""Reading settings from their sources: a YAML file, merged mappings, and validation errors as one line.

Why apart from the settings model (``core/config.py``): training configs and rules files read YAML and
report validation errors the same way, and the model's module is kept to the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from interleave_thinker.core.errors import ConfigError


def format_validation_error(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        elif error["type"] == "missing":
            problems.append(f"missing key '{key}'")
        else:
            problems.append(f"'{key}': {error['msg']}")
    return "; ".join(problems)


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror}.") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must hold a mapping of keys, not a {type(data).__name__}.")
    return data


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    """``extra`` into ``base``, mapping by mapping (later sources win key by key)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
