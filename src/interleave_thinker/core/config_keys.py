"""The settings' keys as documentation: each dotted key, its help text, and docs/configuration.md's table.

Why apart from the settings models: flags take their help from here and the docs table is generated
here; neither is needed to read or check a configuration.
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from interleave_thinker.core.config import PipelineConfig


def settings_field(path: str, model: type[BaseModel] = PipelineConfig) -> FieldInfo:
    """The settings field at dotted ``path`` (``loop.seed_base``): its type, bounds and description."""
    *sections, name = path.split(".")
    for section in sections:
        annotation = model.model_fields[section].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), path
        model = annotation
    return model.model_fields[name]


def field_help(path: str, model: type[BaseModel] = PipelineConfig) -> str:
    """The description of the settings field at dotted ``path`` (``loop.seed_base``): a flag's help text."""
    description = settings_field(path, model).description
    if not description:
        raise ValueError(f"settings field {path} has no description; a flag's help comes from it")
    return description


def documented_keys(model: type[BaseModel] = PipelineConfig, prefix: str = "") -> list[str]:
    """Every leaf key of the settings, dotted (``remote.timeout``): the rows docs/configuration.md must have."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += documented_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


DOC_DEFAULTS = {"preset": "`official`", "planner": "preset", "critic": "preset", "generator": "preset"}
"""Defaults the table shows where the field's own default says less (the required backend specs)."""


def config_table() -> str:
    """The keys table of docs/configuration.md, from the fields: key, default, description (kept in sync
    by tests/core/test_config.py; regenerate with ``python -c "from interleave_thinker.core.config_keys import
    config_table; print(config_table())"``)."""
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for key in documented_keys():
        default = settings_field(key).default
        shown = DOC_DEFAULTS.get(key) or (
            "none"
            if default is None
            else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        )
        rows.append(f"| `{key}` | {shown} | {field_help(key).replace('|', '/')} |")
    return "\n".join(rows)
