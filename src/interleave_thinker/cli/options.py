"""The settings flags every command shares, declared once from the settings fields.

A flag's help is its field's description (``core/config.py``), as TRL builds its CLI from its config
fields; :func:`with_settings` adds the flags to a command and hands it one :class:`SettingsFlags`, so
presets, ``--config`` YAML, environment and flags merge the same way in every command.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import annotated_types
import typer

from interleave_thinker.core.config import PipelineConfig, PresetName
from interleave_thinker.core.config_keys import field_help, settings_field
from interleave_thinker.core.errors import ConfigError, InputError

if TYPE_CHECKING:
    from interleave_thinker.runtime.scheduler import BatchSettings

PresetOption = Annotated[
    PresetName | None, typer.Option(help=field_help("preset") + " \\[default: official]")
]
ConfigOption = Annotated[
    Path | None, typer.Option(help="YAML settings file (keys as in docs/configuration.md).")
]
DtypeOption = Annotated[str | None, typer.Option(help=field_help("model.dtype"))]

LimitOption = Annotated[int | None, typer.Option(min=1, help="Only the first N requests of the input.")]


def field_defaults(settings: type) -> dict[str, Any]:
    """The defaults of the dataclass ``settings``'s fields that have one: the defaults of the flags that
    fill them, so flag and setting cannot drift (``--judge-concurrency``, the `serve` flags)."""
    fields = dataclasses.fields(settings)
    return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}


def flag(kind: Any, default: Any, help: str, *names: str, min: int | None = None) -> tuple[Any, Any]:
    """``(declaration, default)`` of one flag for :func:`with_flags`: its type, default and help in one row."""
    return Annotated[kind, typer.Option(*names, min=min, help=help)], default


def scheduling_flag(kind: Any, name: str, help: str, *names: str, min: int | None = None) -> tuple[Any, Any]:
    """:func:`flag` with the default of :class:`SchedulingFlags`'s field ``name`` (one source for both)."""
    return flag(kind, SCHEDULING_DEFAULTS[name], help, *names, min=min)


SCHEDULING_DEFAULTS: dict[str, Any] = {
    "concurrency": 16,
    "resume": True,
    "retry_failed": True,
    "accept_changed_input": False,
    "quiet": False,
    "fresh": False,
}
"""The defaults of the scheduling flags that have one: the flags' and :class:`SchedulingFlags`'s."""


SCHEDULING_FLAGS: dict[str, tuple[Any, Any]] = {
    "concurrency": scheduling_flag(
        int, "concurrency", "Requests (benchmark items) in flight at once.", min=1
    ),
    "per_backend_limit": flag(list[str] | None, None, "ROLE=N calls in flight for one backend."),
    "micro_batch": flag(list[str] | None, None, "ROLE whose local model batches calls across requests."),
    "speculate_share": flag(
        float,
        1.0,
        "With --speculate: share of the generator's calls in flight (its --per-backend-limit) that calls made "
        "ahead may hold, at least one; 1 = no cap.",
        "--speculate-share",
    ),
    "shard": flag(str | None, None, "I/N: run every N-th request starting at I (0-based)."),
    "limit": (LimitOption, None),
    "resume": scheduling_flag(bool, "resume", "Continue the run in --out: skip finished requests."),
    "retry_failed": scheduling_flag(
        bool,
        "retry_failed",
        "When resuming, run the requests that failed again (--no-retry-failed keeps them).",
    ),
    "accept_changed_input": scheduling_flag(
        bool,
        "accept_changed_input",
        "When resuming, run again the requests whose prompt, images or task changed in the input (their "
        "earlier outputs move to <out>.old-<time>) instead of refusing.",
        "--accept-changed-input",
    ),
    "quiet": scheduling_flag(bool, "quiet", "Log lines instead of a progress bar."),
    "fresh": scheduling_flag(
        bool,
        "fresh",
        "Start over: move what --out holds aside to <out>.old-<time> (nothing is deleted).",
        "--fresh",
    ),
}
"""The scheduling flags of every command on the batch scheduler (`batch`, `data generate`, `eval
generate`, `eval run`): name -> (declaration, default)."""
ROLES = ("planner", "critic", "generator")


def setting_flag(key: str) -> tuple[str, Any]:
    """``(key, declaration)`` of the flag that sets settings key ``key``: its type, lower bound and help are
    the field's, so flag and setting cannot drift; the flag not given (None) leaves the key to the preset,
    the file and the environment."""
    field = settings_field(key)
    floor = next((rule.ge for rule in field.metadata if isinstance(rule, annotated_types.Ge)), None)
    option = typer.Option(help=field_help(key), min=floor if isinstance(floor, int) else None)
    assert field.annotation is not None, key
    return key, Annotated[field.annotation | None, option]


SETTINGS_FLAGS: dict[str, tuple[str, Any]] = {
    "preset": ("preset", PresetOption),
    "config": ("", ConfigOption),
    "device": setting_flag("model.device"),
}
"""Flags of every command that reads settings: name -> (settings key, declaration)."""
LOOP_FLAGS = (
    "planner_fallback",
    "text_steps",
    "critic_on_last_attempt",
    "references",
    "candidates",
    "speculate",
    "select_best",
    "repair_budget",
)
"""Loop settings whose flag has the key's name (``--select-best`` sets ``loop.select_best``)."""
PIPELINE_FLAGS: dict[str, tuple[str, Any]] = {
    **{role: setting_flag(role) for role in ROLES},
    "max_attempts": setting_flag("loop.max_attempts"),
    "seed": setting_flag("loop.seed_base"),
    **{name: setting_flag(f"loop.{name}") for name in LOOP_FLAGS},
    "select_best_judge": setting_flag("judge"),  # not --judge: on `eval run` that names the scoring judge
}
"""Flags of the commands that build a pipeline (run, batch, eval generate, demo)."""


@dataclass(frozen=True)
class SettingsFlags:
    """The settings flags one command was given; :meth:`resolve` merges them over preset, file and env."""

    values: dict[str, Any]
    pipeline: bool = False

    def resolve(self, **extra: Any) -> PipelineConfig:
        """The settings (specs and device checked, nothing heavy imported); ``extra`` are more flags."""
        from interleave_thinker.cli.specs import check_pipeline_specs

        flags = {**self.values, **{k: v for k, v in extra.items() if v is not None}}
        keys = {**SETTINGS_FLAGS, **PIPELINE_FLAGS, **EXTRA_KEYS}
        overrides: dict[str, Any] = {}
        for name, value in flags.items():
            if value is None or name in ("preset", "config"):
                continue
            *sections, leaf = keys[name][0].split(".")
            target = overrides
            for section in sections:
                target = target.setdefault(section, {})
            target[leaf] = value
        cfg = PipelineConfig.resolve(
            preset=flags.get("preset"),
            config_file=flags.get("config"),
            overrides=overrides,
        )
        if self.pipeline:
            check_pipeline_specs(cfg.model_dump(include={"planner", "critic", "generator"}), flags)
        check_device(cfg.model.device, "--device" if flags.get("device") else "config key 'model.device'")
        if cfg.scale.ray_address is not None:
            check_ray()
        return cfg


@dataclass(frozen=True)
class SchedulingFlags:
    """How a command on the batch scheduler runs its items: one declaration, read the same everywhere."""

    concurrency: int = SCHEDULING_DEFAULTS["concurrency"]
    per_backend_limit: tuple[str, ...] = ()
    micro_batch: tuple[str, ...] = ()
    speculate_share: float = 1.0
    shard: str | None = None
    limit: int | None = None
    resume: bool = SCHEDULING_DEFAULTS["resume"]
    retry_failed: bool = SCHEDULING_DEFAULTS["retry_failed"]
    accept_changed_input: bool = SCHEDULING_DEFAULTS["accept_changed_input"]
    quiet: bool = SCHEDULING_DEFAULTS["quiet"]
    fresh: bool = SCHEDULING_DEFAULTS["fresh"]

    @classmethod
    def given(cls, values: dict[str, Any]) -> SchedulingFlags:
        """The flags as typer hands them (lists, or None for a list flag not given)."""
        lists = {k: tuple(values[k] or ()) for k in ("per_backend_limit", "micro_batch")}
        return cls(**{**values, **lists})

    def limits(self) -> dict[str, int]:
        """``--per-backend-limit ROLE=N`` (and the roles of ``--micro-batch``, and ``--speculate-share``),
        checked before anything loads."""
        if not 0 < self.speculate_share <= 1:
            raise InputError(f"--speculate-share {self.speculate_share}: give a share above 0 and at most 1.")
        return parse_limits(list(self.per_backend_limit), list(self.micro_batch))

    def shard_spec(self) -> tuple[int, int] | None:
        """``--shard I/N`` checked, or None."""
        from interleave_thinker.runtime.batch_inputs import parse_shard

        return parse_shard(self.shard) if self.shard else None

    def batch_settings(self) -> BatchSettings:
        """The scheduler's settings: concurrency, per-backend limits, micro-batching, failed ones retried."""
        from interleave_thinker.runtime.scheduler import BatchSettings

        return BatchSettings(
            concurrency=self.concurrency,
            limits=self.limits(),
            micro_batch=set(self.micro_batch),
            retry_failed=self.retry_failed,
            speculate_share=self.speculate_share,
        )


def parse_limits(values: list[str], micro_batch: list[str] | None = None) -> dict[str, int]:
    """``--per-backend-limit ROLE=N`` values (and the roles of ``--micro-batch``), checked."""
    for role in micro_batch or []:
        if role not in ROLES:
            raise InputError(f"--micro-batch {role!r}: choose from {', '.join(ROLES)}.")
    limits: dict[str, int] = {}
    for value in values:
        role, sep, number = value.partition("=")
        if not sep or role not in ROLES or not number.isdigit() or int(number) < 1:
            raise InputError(
                f"--per-backend-limit {value!r}: write ROLE=N with ROLE in {', '.join(ROLES)} and N >= 1."
            )
        limits[role] = int(number)
    return limits


EXTRA_KEYS: dict[str, tuple[str, Any]] = {
    "dtype": ("model.dtype", DtypeOption),
    "base_url": ("prompts.base_url", None),
    "folder": ("prompts.folder", None),
    "max_fallback_share": setting_flag("agents.max_fallback_share"),
    "ray": setting_flag("scale.ray_address"),  # the commands on the batch scheduler (docs/cluster.md)
    "preflight": setting_flag("remote.preflight"),
}
"""Settings flags only some commands take, passed to :meth:`SettingsFlags.resolve` by name."""

F = TypeVar("F", bound=Callable[..., Any])


def with_settings(*, pipeline: bool = False, extra: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Add the shared settings flags (and with ``pipeline`` the backend and loop flags, and the flags of
    :data:`EXTRA_KEYS` named in ``extra``) to a command.

    The command declares a ``settings: SettingsFlags`` parameter instead of the flags themselves.
    """
    flags = {**SETTINGS_FLAGS, **(PIPELINE_FLAGS if pipeline else {}), **{k: EXTRA_KEYS[k] for k in extra}}
    declarations = {name: (declaration, None) for name, (_, declaration) in flags.items()}
    return with_flags(declarations, "settings", lambda given: SettingsFlags(given, pipeline=pipeline))


def with_scheduling_flags() -> Callable[[F], F]:
    """Make a command one on the batch scheduler: the scheduling flags, and the settings flags with the
    pipeline's (every such command builds a pipeline), ``--max-fallback-share``, ``--ray`` and
    ``--preflight/--no-preflight``; it declares
    ``settings: SettingsFlags`` and ``scheduling: SchedulingFlags`` instead of the flags."""
    scheduling = with_flags(SCHEDULING_FLAGS, "scheduling", SchedulingFlags.given)
    settings = with_settings(pipeline=True, extra=("max_fallback_share", "ray", "preflight"))
    return lambda func: scheduling(settings(func))


def with_flags(
    declarations: dict[str, tuple[Any, Any]], into: str, make: Callable[[dict[str, Any]], Any]
) -> Callable[[F], F]:
    """Add the flags ``name -> (declaration, default)`` to a command; it receives ``make(values)`` as ``into``.

    One declaration serves every command that takes the flags, so their spelling and help cannot drift.
    """

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != into]
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=declaration)
            for name, (declaration, default) in declarations.items()
        ]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in declarations}
            return func(**kwargs, **{into: make(given)})

        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
        command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command  # type: ignore[return-value]

    return decorate


def check_ray() -> None:
    """``--ray`` (``scale.ray_address``) without Ray installed: one line naming the extra, before anything
    is written or loaded (Ray itself is imported only when the cluster is joined)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except ValueError:  # a module entry without a spec: not an importable Ray
        found = False
    if not found:
        raise ConfigError("--ray needs Ray: pip install 'interleave-thinker[ray]'")


def check_device(device: str | None, source: str = "--device") -> None:
    """Refuse a device torch cannot use here, before any model loads (instead of a traceback later)."""
    if device is None or device in ("cpu", "auto"):
        return
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise ConfigError(f"{source} {device}: use cpu, cuda, cuda:N or auto (model.device).")
    import torch

    index = int(device.partition(":")[2] or 0)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise ConfigError(
            f"{source} {device}: no such CUDA device on this machine "
            f"({torch.cuda.device_count()} visible); use --device cpu or auto."
        )


def deprecated(old: str, new: str) -> Callable[[Any], Any]:
    """A hidden old flag's callback: it still works, and says once which flag replaces it."""

    def note(value: Any) -> Any:
        if value not in (None, False, []):
            typer.echo(f"note: {old} is deprecated; use {new}.", err=True)
        return value

    return note


def renamed(name: str, declaration: Any, default: Any, old: str, old_type: type) -> Callable[[F], F]:
    """Add the flag ``name`` and its old spelling ``old`` as a hidden alias that says once it is deprecated.

    The command receives one value as ``name``: the new flag's, else the old one's, else ``default``
    (one name per concept, docs/glossary.md; scripts written for the old name keep working).
    """
    new = "--" + name.replace("_", "-")
    alias = Annotated[old_type | None, typer.Option(old, hidden=True, callback=deprecated(old, new))]  # type: ignore[valid-type]

    def make(given: dict[str, Any]) -> Any:
        value, old_value = given[name], given[f"{name}_old_spelling"]
        return old_value if old_value is not None and value == default else value

    return with_flags({name: (declaration, default), f"{name}_old_spelling": (alias, None)}, name, make)


def quiet_diffusers(generator: str) -> None:
    """Silence diffusers' bars for a local ``generator``; a served one imports nothing (no torch)."""
    from interleave_thinker.backends.specs import is_local

    if not is_local(generator):
        return
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()
