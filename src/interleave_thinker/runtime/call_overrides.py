"""Settings given in Python calls: ``pipe(..., seed=7, num_inference_steps=4)`` and
``Pipeline.from_preset(..., device=)``.

Why here and not in the pipeline: a per-call value is a config field (``seed`` is ``loop.seed_base`` as
``--seed`` is, ``num_inference_steps`` is ``generation.steps`` as ``--steps`` is), validated by the same
pydantic section models as a YAML file, so a bad one is the same :class:`ConfigError`, naming the
argument as the caller wrote it. The arguments carry diffusers' names (``image``, ``num_inference_steps``,
``guidance_scale``); the config's short names (``images``, ``steps``, ``guidance``) are accepted aliases,
and giving both forms of one setting is an error naming both. The call runs on a copy of the pipeline
holding the merged config, so concurrent calls (the batch scheduler runs many from threads) never see
each other's values.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError

from interleave_thinker.backends.wrapping import generator_device
from interleave_thinker.core.config import GenerationOptions, LoopOptions, PipelineConfig
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.runtime.input_images import InputImages

CALL_KEYS: dict[str, tuple[str, str]] = {
    "seed": ("loop", "seed_base"),
    "max_attempts": ("loop", "max_attempts"),
    "width": ("generation", "width"),
    "height": ("generation", "height"),
    "num_inference_steps": ("generation", "steps"),
    "guidance_scale": ("generation", "guidance"),
}
"""Argument of ``Pipeline.__call__`` (diffusers' names) -> (config section, key)."""
ALIASES: dict[str, str] = {"images": "image", "steps": "num_inference_steps", "guidance": "guidance_scale"}
"""Accepted alias -> documented argument: the config's, the flags' and ``ImageRequest``'s short names."""
SECTIONS: dict[str, type[BaseModel]] = {"loop": LoopOptions, "generation": GenerationOptions}


class CallOverrides(TypedDict, total=False):
    """The keywords ``Pipeline.__call__`` takes beyond its own: :data:`CALL_KEYS`' per-call settings and
    the aliases of :data:`ALIASES`; None = the config's value (``images``: ``image``'s)."""

    seed: int | None
    num_inference_steps: int | None
    steps: int | None
    width: int | None
    height: int | None
    guidance_scale: float | None
    guidance: float | None
    max_attempts: int | None
    images: InputImages | None


class Configured(Protocol):
    """What :func:`for_call` needs of a pipeline (named so, not imported: the pipeline imports this)."""

    config: PipelineConfig
    call_overrides: dict[str, Any]


P = TypeVar("P", bound=Configured)


def one_form(**values: Any) -> Any:
    """The value of the one form given of an argument and its alias (``image=``/``images=``), or None.

    >>> one_form(image=None, images="cat.png")
    'cat.png'
    """
    given = [name for name, value in values.items() if value is not None]
    if len(given) > 1:
        documented = next(name for name in given if name not in ALIASES)
        alias = next(name for name in given if name in ALIASES)
        raise ConfigError(
            f"The pipeline call got both {documented}= and {alias}=, two names of one setting "
            f"({alias}= is an alias of {documented}=); give only {documented}=."
        )
    return values[given[0]] if given else None


def given_overrides(**values: Any) -> dict[str, Any]:
    """The per-call settings that were given (None = use the config's value), keyed by the name the
    caller wrote (an alias included, so an error names it); both forms of one setting raise ConfigError,
    a name that is not a setting TypeError (as Python's own check of a keyword would)."""
    unknown = sorted(set(values) - CallOverrides.__optional_keys__)
    if unknown:
        raise TypeError(f"Pipeline.__call__() got an unexpected keyword argument '{unknown[0]}'")
    # in the order declared, whatever the caller's: the trace and the errors list them alike every time
    given = {name: values[name] for name in CallOverrides.__annotations__ if values.get(name) is not None}
    for alias, name in ALIASES.items():
        if alias in given:
            one_form(**{name: given.get(name), alias: given[alias]})
    return given


def _key(name: str) -> tuple[str, str]:
    """(config section, key) of a per-call argument or of its alias."""
    return CALL_KEYS[ALIASES.get(name, name)]


def merged_config(config: PipelineConfig, overrides: dict[str, Any]) -> PipelineConfig:
    """``config`` with the per-call values, each section validated whole (cross-field checks included)."""
    sections: dict[str, dict[str, Any]] = {}
    for name, value in overrides.items():
        section, key = _key(name)
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
    call.call_overrides = {ALIASES.get(name, name): value for name, value in overrides.items()}
    return call


def call_settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """What the trace's ``settings`` adds for a call with per-call values (nothing without them); the
    names are the documented ones (:func:`for_call` renames an alias) whichever form the caller wrote."""
    return {"call_overrides": dict(overrides)} if overrides else {}


def trace_settings(config: PipelineConfig, overrides: dict[str, Any], generator: Any) -> dict[str, Any]:
    """The settings a trace records: the loop's (opt-in ones when changed), generation, per-call values,
    and ``generator_seed_device``: where a local generator seeds (``cpu``, ``cuda:0``; model.seed_device),
    nothing for a served generator (its server seeds)."""
    device = generator_device(generator)
    return {
        "loop": config.loop.trace_settings(),
        "generation": config.generation.model_dump(),
        **call_settings(overrides),
        **({} if device is None else {"generator_seed_device": device}),
    }


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
    """The problem named by the argument the caller wrote (``num_inference_steps=0``) and its config key."""
    names = {_key(arg)[1]: arg for arg in overrides if _key(arg)[0] == section}
    problems = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        if key in names:
            arg = names[key]
            problems.append(f"{arg}={overrides.get(arg)!r} ({section}.{key}): {message}")
        else:  # a cross-field check of the section: name every argument given in it
            given = ", ".join(f"{a}={v!r}" for a, v in overrides.items() if _key(a)[0] == section)
            problems.append(f"{given}: {message}")
    return f"Invalid argument of the pipeline call: {'; '.join(problems)}."
