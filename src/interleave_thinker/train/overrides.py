"""``--set KEY=VALUE``: one config key of a training run changed on the command line.

Why: TRL users change a learning rate or a step count without editing the YAML (``TrlParser``'s
flags); one repeatable ``--set training.learning_rate=1e-5`` reaches every key of our run configs
without declaring a flag per key. A key is a dotted path of the config model; an unknown one is an
error naming it with the closest known keys; the value is read as YAML (``1e-5``, ``true``, ``null``,
``[a.json, b.json]``) and the result is validated by the same pydantic model as the file.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from interleave_thinker.core.config import format_validation_error, load_yaml
from interleave_thinker.core.config_keys import documented_keys
from interleave_thinker.core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
FREE_SECTIONS = ("trl",)
"""Sections whose keys are not fields of ours (``trl:`` passes any TRL config field; checked by TRL name)."""
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
MAX_VALUE_CHARS = 4096


def parse_value(text: str) -> Any:
    """A ``--set`` value as YAML, with ``1e-5`` a number (YAML 1.1 would keep it a string).

    >>> parse_value("1e-5"), parse_value("true"), parse_value("null"), parse_value("[a, b]")
    (1e-05, True, None, ['a', 'b'])
    """
    if _FLOAT.fullmatch(text.strip()):
        number = float(text)
        return int(number) if re.fullmatch(r"[-+]?\d+", text.strip()) else number
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # not YAML: the text itself, as a string field would take it


def parse_sets(values: Sequence[str], model: type[BaseModel]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` strings -> ``(key, value)``, every key checked against ``model``."""
    known = documented_keys(model)  # every leaf key, dotted, sections walked into
    parsed: list[tuple[str, Any]] = []
    for value in values:
        key, sep, text = value.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"--set {value[:80]!r}: write KEY=VALUE, e.g. --set training.learning_rate=1e-5."
            )
        if len(text) > MAX_VALUE_CHARS:
            raise ConfigError(f"--set {key}: the value is longer than {MAX_VALUE_CHARS} characters.")
        free = key.split(".", 1)[0] in FREE_SECTIONS and "." in key
        if key not in known and not free:
            raise ConfigError(unknown_key_message(key, known))
        parsed.append((key, parse_value(text)))
    return parsed


def flag_sets(args: Sequence[str], model: type[BaseModel]) -> list[str]:
    """TRL-style flags (``--learning_rate 1e-5``, ``--max-steps=2``, a bare ``--bf16``) as ``--set`` strings.

    Why: TRL users type a config field as a flag. A flag names a key of ``model`` by its full dotted path
    or by its last part when one key ends so (``learning_rate`` -> ``training.learning_rate``); a bare
    flag followed by another flag (or nothing) is ``true``. Anything else is the unknown-key error.
    """
    known = documented_keys(model)
    sets: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(
                f"Unexpected argument {arg[:80]!r}: give config keys as --KEY VALUE or --set KEY=VALUE."
            )
        name, sep, value = arg[2:].partition("=")
        if not sep:
            value = rest.pop(0) if rest and not rest[0].startswith("--") else "true"
        sets.append(f"{_full_key(name.replace('-', '_'), known)}={value}")
    return sets


def _full_key(name: str, known: list[str]) -> str:
    if name in known:
        return name
    matches = [key for key in known if key.rsplit(".", 1)[-1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(
            f"--{name} is a key of several sections ({', '.join(matches)}): use --set KEY=VALUE."
        )
    raise ConfigError(unknown_key_message(name, known).replace("--set ", "--", 1))


def unknown_key_message(key: str, known: list[str]) -> str:
    """The error for an unknown ``--set`` key: the key, the closest known ones, where they are listed.

    Close means a near spelling of the whole key, or of its last part under any section
    (``learning_rate`` -> ``training.learning_rate``).
    """
    by_leaf: dict[str, list[str]] = {}
    for full in known:
        by_leaf.setdefault(full.rsplit(".", 1)[-1], []).append(full)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.85)
    for leaf in difflib.get_close_matches(key.rsplit(".", 1)[-1], by_leaf, n=3, cutoff=0.75):
        close += [full for full in by_leaf[leaf] if full not in close]
    hint = f" Did you mean {', '.join(close[:3])}?" if close else ""
    return f"--set {key[:80]}: unknown config key.{hint} The keys are listed in docs/training-config.md."


def apply_sets(data: dict[str, Any], sets: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """``data`` (the YAML's mapping) with each ``(dotted key, value)`` put in place, sections made as needed."""
    for key, value in sets:
        *sections, leaf = key.split(".")
        node = data
        for section in sections:
            child = node.get(section)
            if not isinstance(child, dict):
                child = node[section] = {}
            node = child
        node[leaf] = value
    return data


def load_run_config(
    model: type[M],
    path: Path,
    what: str,
    *,
    overrides: dict[str, Any] | None = None,
    sets: Sequence[str] = (),
) -> M:
    """A run config from YAML, with top-level ``overrides`` (None = keep) and ``--set`` values, validated once."""
    data = apply_sets(load_yaml(path), parse_sets(sets, model))
    data.update({key: value for key, value in (overrides or {}).items() if value is not None})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        origin = f"{path} with --set {', '.join(s.partition('=')[0] for s in sets)}" if sets else str(path)
        raise ConfigError(f"Invalid {what} {origin}: {format_validation_error(exc)}") from None
