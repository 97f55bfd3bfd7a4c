"""The options of a ``fastvideo:`` spec: ``MODEL#num_gpus=2&offload=text_encoder,vae&negative_prompt=...``.

A module of its own so that :func:`~interleave_thinker.backends.specs.check_specs` can refuse a bad option
before anything loads, without importing the backend (numpy, PIL) or FastVideo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from interleave_thinker.core.errors import ConfigError

OFFLOAD_PARTS = ("dit", "dit_layerwise", "text_encoder", "image_encoder", "vae")
"""The parts FastVideo can keep on the CPU; each is a ``from_pretrained`` flag (``vae`` -> ``vae_cpu_offload``,
``dit_layerwise`` -> ``dit_layerwise_offload``)."""
OPTION_NAMES = ("num_gpus", "offload", "negative_prompt", "true_cfg_scale")
MAX_OPTION_CHARS = 2000


@dataclass(frozen=True)
class FastVideoOptions:
    """What a ``fastvideo:`` spec may say after ``#`` besides the model."""

    num_gpus: int = 1
    """GPUs FastVideo spreads the pipeline over (``from_pretrained(num_gpus=...)``)."""
    offload: frozenset[str] | None = None
    """Parts kept on the CPU (``offload=text_encoder,vae``, ``all`` or ``none``); None: FastVideo's defaults."""
    negative_prompt: str | None = None
    """Sent with every call (``GenerationRequest.negative_prompt``); None: the model's preset."""
    true_cfg_scale: float | None = None
    """True classifier-free guidance (``sampling.true_cfg_scale``, above 1 to take effect with a negative
    prompt); None: the model's preset."""

    def load_kwargs(self) -> dict[str, Any]:
        """The ``from_pretrained`` keywords: ``num_gpus``, and all five offload flags when ``offload`` is set."""
        kwargs: dict[str, Any] = {"num_gpus": self.num_gpus}
        if self.offload is not None:
            for part in OFFLOAD_PARTS:
                flag = "dit_layerwise_offload" if part == "dit_layerwise" else f"{part}_cpu_offload"
                kwargs[flag] = part in self.offload
        return kwargs


def _option_error(spec: str, name: str, problem: str) -> ConfigError:
    return ConfigError(f"fastvideo spec {spec!r}: option {name} {problem}.")


def _parse_offload(spec: str, value: str) -> frozenset[str]:
    parts = {p.strip() for p in value.split(",") if p.strip()}
    if parts == {"all"}:
        return frozenset(OFFLOAD_PARTS)
    if parts == {"none"}:
        return frozenset()
    unknown = sorted(parts - set(OFFLOAD_PARTS))
    if unknown or not parts:
        raise _option_error(
            spec,
            "offload",
            f"names unknown part(s) {', '.join(unknown) or '(none given)'}; "
            f"use all, none or a comma list of {', '.join(OFFLOAD_PARTS)}",
        )
    return frozenset(parts)


def parse_target(target: str) -> tuple[str, FastVideoOptions]:
    """``MODEL[#name=value&...]`` -> (model, options); a bad option is a one-line :class:`ConfigError`.

    >>> parse_target("black-forest-labs/FLUX.2-klein-4B#num_gpus=2&offload=vae")[1].load_kwargs()["vae_cpu_offload"]
    True
    """
    spec = f"fastvideo:{target}"
    model, _, fragment = target.partition("#")
    model = model.strip()
    if not model:
        raise ConfigError(
            "fastvideo spec has no model; write fastvideo:MODEL, e.g. 'fastvideo:black-forest-labs/FLUX.2-klein-4B'."
        )
    if len(fragment) > MAX_OPTION_CHARS:
        raise ConfigError(f"fastvideo spec options are longer than {MAX_OPTION_CHARS} characters.")
    values: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in fragment.split("&"))):
        name, sep, raw = item.partition("=")
        name = name.strip()
        if name not in OPTION_NAMES:
            raise ConfigError(
                f"fastvideo spec {spec!r}: unknown option {name!r}; known: {', '.join(OPTION_NAMES)} "
                "(write MODEL#name=value&name=value)."
            )
        if not sep:
            raise _option_error(spec, name, "has no value; write name=value")
        if name in values:
            raise _option_error(spec, name, "is given twice")
        value = unquote(raw).strip()
        if name == "num_gpus":
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                raise _option_error(spec, name, f"must be a whole number of at least 1, got {value!r}")
            values[name] = int(value)
        elif name == "offload":
            values[name] = _parse_offload(spec, value)
        elif name == "true_cfg_scale":
            try:
                scale = float(value)
            except ValueError:
                scale = float("nan")
            if not 1.0 <= scale <= 100.0:
                raise _option_error(spec, name, f"must be a number from 1 to 100 (1 = off), got {value!r}")
            values[name] = scale
        else:
            values[name] = value
    return model, FastVideoOptions(**values)
