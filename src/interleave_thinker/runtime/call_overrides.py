"""Settings given in Python calls: ``pipe(..., seed=7, steps=4)`` and ``Pipeline.from_preset(..., device=)``.

Why here and not in the pipeline: a per-call value is a config field under its flag's name (``seed`` is
``loop.seed_base`` as ``--seed`` is, ``steps`` is ``generation.steps``), validated by the same pydantic
section models as a YAML file, so a bad one is the same :class:`ConfigError`, naming the argument. The
call runs on a copy of the pipeline holding the merged config, so concurrent calls (the batch scheduler
runs many from threads) never see each other's values.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from interleave_thinker.core.config import GenerationOptions, LoopOptions, PipelineConfig
from interleave_thinker.core.errors import ConfigError

CALL_KEYS: dict[str, tuple[str, str]] = {
    "seed": ("loop", "seed_base"),
    "max_attempts": ("loop", "max_attempts"),
    "width": ("generation", "width"),
    "height": ("generation", "height"),
    "steps": ("generation", "steps"),
    "guidance": ("generation", "guidance"),
}
"""Argument of ``Pipeline.__call__`` -> (config section, key); the names of the flags and of ``ImageRequest``."""
SECTIONS: dict[str, type[BaseModel]] = {"loop": LoopOptions, "generation": GenerationOptions}


class Configured(Protocol):
    """What :func:`for_call` needs of a pipeline (named so, not imported: the pipeline imports this)."""

    config: PipelineConfig
    call_overrides: dict[str, Any]


P = TypeVar("P", bound=Configured)


def given_overrides(**values: Any) -> dict[str, Any]:
    """The per-call arguments that were given (None = use the config's value)."""
    return {name: value for name, value in values.items() if value is not None}


def merged_config(config: PipelineConfig, overrides: dict[str, Any]) -> PipelineConfig:
    """``config`` with the per-call values, each section validated whole (cross-field checks included)."""
    sections: dict[str, dict[str, Any]] = {}
    for name, value in overrides.items():
        section, key = CALL_KEYS[name]
        sections.setdefault(section, getattr(config, section).model_dump())[key] = value
    updated: dict[str, BaseModel] = {}
    for section, data in sections.items():
        try:
            updated[section] = SECTIONS[section].model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_call_error(section, exc, overrides)) from None
    return config.model_copy(update=updated)


def for_call(pipe: P, overrides: dict[str, Any]) -> P:
    """A shallow copy of ``pipe`` (same backends and agents) that runs with the per-call values."""
    call = copy.copy(pipe)
    call.config = merged_config(pipe.config, overrides)
    call.call_overrides = dict(overrides)
    return call


def call_settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """What the trace's ``settings`` adds for a call with per-call values (nothing without them)."""
    return {"call_overrides": dict(overrides)} if overrides else {}


def preset_config(
    name: str, *, device: str | None, dtype: str | None, overrides: dict[str, Any]
) -> PipelineConfig:
    """The config of ``Pipeline.from_preset``: the preset, env, then ``overrides``; ``device``/``dtype``
    are ``model.device``/``model.dtype`` (as ``--device`` is), merged with any ``model={...}`` given."""
    model = {"device": device, "dtype": dtype}
    given = {key: value for key, value in model.items() if value is not None}
    if given:
        overrides = {**overrides, "model": {**dict(overrides.get("model") or {}), **given}}
    return PipelineConfig.resolve(preset=name, overrides=overrides)


def _call_error(section: str, exc: ValidationError, overrides: dict[str, Any]) -> str:
    """The problem named by the argument the caller wrote (``steps=0``) and its config key."""
    names = {key: arg for arg, (sec, key) in CALL_KEYS.items() if sec == section}
    problems = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        if key in names:
            arg = names[key]
            problems.append(f"{arg}={overrides.get(arg)!r} ({section}.{key}): {message}")
        else:  # a cross-field check of the section: name every argument given in it
            given = ", ".join(f"{a}={v!r}" for a, v in overrides.items() if CALL_KEYS[a][0] == section)
            problems.append(f"{given}: {message}")
    return f"Invalid argument of the pipeline call: {'; '.join(problems)}."
