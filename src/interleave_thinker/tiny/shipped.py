"""Shipped tiny models: the format-trained tiny planner and critic and the tiny generator, as our own
code builds them, committed as package data so a first ``make demo`` trains nothing.

Why: format training takes minutes of CPU and the demo needs it on first use. The files under
``tiny/artefacts/`` are exactly what a fresh build writes (``tests/tiny/test_reproducibility.py`` rebuilds
one and requires byte-identical files, and checks what the others were trained from); ``manifest.json``
records each model's recipe (versions, seed, template digest, library versions), the SHA-256 of each
file and, for a format-trained model, of its training inputs. A cache folder is filled from them only
when the recipe the code would build now is the recorded one and every digest matches; otherwise the
model is built as before. ``INTERLEAVE_THINKER_TINY_REBUILD=1`` always builds.
Regenerate with ``python -m interleave_thinker.tiny.rebuild`` (see docs/testing.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

ARTEFACTS = Path(__file__).parent / "artefacts"
MANIFEST = ARTEFACTS / "manifest.json"
REBUILD_ENV = "INTERLEAVE_THINKER_TINY_REBUILD"
SHIPPED_FILES = (
    "config.json",
    "generation_config.json",
    "chat_template.jinja",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model_index.json",
    "*.safetensors",
    "*/*.json",
    "*/*.safetensors",
    "*/*.jinja",
)
"""What a model needs to load; left out: the trainer's ``training_args.bin`` (a pickle holding the build's
temp path) and its model card."""


def library_versions(*names: str) -> dict[str, str]:
    """Installed versions without a local label (``2.14.1+cu130`` -> ``2.14.1``): the pins name those."""
    return {name: metadata.version(name).split("+")[0] for name in names}


def recipe_digest(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode("utf-8")).hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rebuild_requested() -> bool:
    return os.environ.get(REBUILD_ENV, "").strip().lower() in ("1", "true", "yes")


@contextlib.contextmanager
def rebuilding() -> Iterator[None]:
    """Build from scratch inside this block (the artefact writer and the reproducibility test)."""
    old = os.environ.get(REBUILD_ENV)
    os.environ[REBUILD_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ[REBUILD_ENV]
        else:
            os.environ[REBUILD_ENV] = old


def load_manifest() -> dict[str, Any]:
    """``{"models": {key: {"recipe": ..., "recipe_digest": ..., "files": {name: sha256}}}}``, and for a
    format-trained model ``"inputs"`` (``format_trained.training_inputs``); empty if absent."""
    try:
        loaded: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"models": {}}
    return loaded


def model_files(folder: Path) -> list[Path]:
    """The files of a built model folder that are shipped, sorted, relative to ``folder``."""
    found = {p.relative_to(folder) for pattern in SHIPPED_FILES for p in folder.glob(pattern) if p.is_file()}
    return sorted(found)


def shipped_folder(key: str, recipe: dict[str, Any]) -> Path | None:
    """The shipped copy of ``key`` if it was made by ``recipe`` and every file matches its digest."""
    entry = load_manifest()["models"].get(key)
    if rebuild_requested() or entry is None or entry.get("recipe_digest") != recipe_digest(recipe):
        return None
    folder = ARTEFACTS / key
    for name, digest in entry["files"].items():
        path = folder / name
        if not path.is_file() or file_digest(path) != digest:
            return None
    return folder


def install_shipped(key: str, recipe: dict[str, Any], tmp: Path) -> bool:
    """Copy the shipped ``key`` into ``tmp`` (the caller adds its marker and renames); False if none fits."""
    source = shipped_folder(key, recipe)
    if source is None:
        return False
    shutil.rmtree(tmp, ignore_errors=True)
    for name in load_manifest()["models"][key]["files"]:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, tmp / name)
    return True


def write_artefact(key: str, recipe: dict[str, Any], built: Path, dest: Path = ARTEFACTS) -> dict[str, Any]:
    """Copy a freshly built model into ``dest/key`` and return its manifest entry."""
    target = dest / key
    shutil.rmtree(target, ignore_errors=True)
    files: dict[str, str] = {}
    for name in model_files(built):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built / name, target / name)
        files[str(name)] = file_digest(target / name)
    return {"recipe": recipe, "recipe_digest": recipe_digest(recipe), "files": files}


def write_manifest(entries: dict[str, dict[str, Any]], dest: Path = ARTEFACTS) -> Path:
    path = dest / "manifest.json"
    path.write_text(json.dumps({"models": entries}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path
