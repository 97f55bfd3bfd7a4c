"""Rebuilding the shipped tiny models (``tiny/artefacts``): fresh builds, never copies, of every shipped
model; the training inputs of each format-trained one; and the writer of the artefact folder and its
manifest.

Regenerate the artefacts after changing a recipe (docs/testing.md)::

    python -m interleave_thinker.tiny.rebuild [DEST]
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.tiny.format_trained import (
    INPUTS_FILE,
    SHIPPED_ROLES,
    BuildJob,
    ensure_format_trained,
    format_folder,
    format_recipe,
    template_digest,
)
from interleave_thinker.tiny.models import ensure_tiny_model, tiny_recipe
from interleave_thinker.tiny.pinned import run_pinned
from interleave_thinker.tiny.shipped import ARTEFACTS, rebuilding, write_artefact, write_manifest


def build_shipped(
    work: Path, roles: Sequence[str] = SHIPPED_ROLES
) -> dict[str, tuple[dict[str, object], Path]]:
    """Fresh builds, never copies, of the shipped models (the tiny generator and the format-trained planner,
    critic and judge for the built-in templates, or those of ``roles``) under ``work``:
    ``{artefact key: (recipe, folder)}``."""
    templates = builtin_templates()
    root = work / "tiny"
    with rebuilding():
        built = {"generator": (tiny_recipe("generator"), ensure_tiny_model("generator", root))}
        for role in roles:
            path = ensure_format_trained(role, root, templates=templates)
            recipe = format_recipe(role, template_digest(role, templates))
            built[f"{path.parent.name}/{role}"] = (recipe, path)
    return built


def shipped_inputs(work: Path, roles: Sequence[str] = SHIPPED_ROLES) -> dict[str, dict[str, str]]:
    """``format_trained.training_inputs`` of each format-trained role's fresh build for the built-in
    templates, made in one child with pinned numerics, training nothing:
    ``{artefact key: {"base": ..., "data": ...}}``."""
    templates = builtin_templates()
    source = ensure_tiny_model("planner", work / "tiny")
    jobs: dict[str, Path] = {}
    for role in roles:
        folder = work / role
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "job.json").write_text(
            BuildJob(role, templates, source, inputs_only=True).to_json(), encoding="utf-8"
        )
        key = f"{format_folder(template_digest(role, templates))}/{role}"
        jobs[key] = folder
    run_pinned(
        [
            "-m",
            "interleave_thinker.tiny.format_trained",
            *(str(folder / "job.json") for folder in jobs.values()),
        ],
        "the format-trained tiny models' training inputs",
    )
    return {
        key: json.loads((folder / INPUTS_FILE).read_text(encoding="utf-8")) for key, folder in jobs.items()
    }


def write_artefacts(dest: Path | None = None) -> Path:
    """Rebuild every shipped model in a temp folder and write it with its manifest into ``dest``."""
    dest = dest or ARTEFACTS
    with tempfile.TemporaryDirectory(prefix="tiny-artefacts-") as work:
        built = build_shipped(Path(work))
        if (dest / "manifest.json").is_file():  # an artefact folder: models no longer shipped go
            shutil.rmtree(dest)
        entries = {key: write_artefact(key, recipe, path, dest) for key, (recipe, path) in built.items()}
        for key, (_, path) in built.items():
            if (path / INPUTS_FILE).is_file():  # a format-trained model: what it was trained from
                entries[key]["inputs"] = json.loads((path / INPUTS_FILE).read_text(encoding="utf-8"))
    return write_manifest(entries, dest)


if __name__ == "__main__":
    import sys

    print(f"wrote {write_artefacts(Path(sys.argv[1]) if len(sys.argv) > 1 else None)}")
