"""Backend specs checked at the command line, before any model library is imported.

A typo in ``--planner nope:bar`` must answer in about a second with the flag named, not after torch and
diffusers have loaded (15 s). Only the registries' keys are read here; no loader runs.
"""

from __future__ import annotations

from typing import Literal

Role = Literal["vlm", "image"]
EXAMPLES = {"vlm": "transformers:Qwen/Qwen3-VL-8B-Instruct", "image": "diffusers:PATH_OR_ID"}


def known_kinds(role: Role) -> list[str]:
    """The backend kinds of one role, from the registries in ``backends/specs.py`` (keys only)."""
    from interleave_thinker.backends.specs import IMAGE_BACKENDS, VLM_BACKENDS

    return sorted(VLM_BACKENDS if role == "vlm" else IMAGE_BACKENDS)


def check_spec(source: str, spec: str, role: Role) -> None:
    """Refuse a spec whose kind is unknown or whose target is empty; ``source`` names the flag or key."""
    from interleave_thinker.backends.specs import IMAGE_BACKENDS, VLM_BACKENDS, parse_spec

    parse_spec(spec, VLM_BACKENDS if role == "vlm" else IMAGE_BACKENDS, source=source, example=EXAMPLES[role])


PIPELINE_ROLES: dict[str, Role] = {"planner": "vlm", "critic": "vlm", "generator": "image"}


def check_pipeline_specs(specs: dict[str, str], flags: dict[str, object]) -> None:
    """Check the planner, critic and generator specs, naming ``--ROLE`` when a flag set it, else the key."""
    for name, role in PIPELINE_ROLES.items():
        source = f"--{name}" if flags.get(name) else f"config key '{name}'"
        check_spec(source, specs[name], role)
