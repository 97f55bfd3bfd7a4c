"""WISE's data: a folder of ``*_verified.json`` (WISE_Verified, ``data_verified/``) or of the legacy
files (``WISE_legacy/data/``), one such file, or ``hf:ID[:split]`` (WISE_Verified when the id contains
"verified")."""

from __future__ import annotations

from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.datasets import EvalItem, hf_records, json_items, text_field, unique

LEGACY_FILES = ("cultural_common_sense.json", "spatio-temporal_reasoning.json", "natural_science.json")


def _wise_files(path: Path) -> tuple[list[Path], str]:
    if path.is_file():
        return [path], "verified" if path.name.endswith("_verified.json") else "legacy"
    if not path.is_dir():
        raise InputError(f"--data {path}: no such file or folder.")
    verified = sorted(path.glob("*_verified.json"))
    legacy = [path / name for name in LEGACY_FILES if (path / name).is_file()]
    if verified and legacy:
        raise InputError(
            f"{path} holds both WISE_Verified (*_verified.json) and legacy prompt files; "
            "point --data at one set (their prompt ids mean different prompts)."
        )
    if not verified and not legacy:
        raise InputError(
            f"{path} holds no WISE prompt files (*_verified.json, or {', '.join(LEGACY_FILES)})."
        )
    return (verified, "verified") if verified else (legacy, "legacy")


def load(data: str) -> list[EvalItem]:
    """WISE prompts (``Prompt``, ``Explanation``, ``Category``, ``Subcategory``, ``prompt_id``), by prompt id."""
    if data.startswith("hf:"):
        rows, root = hf_records(data)
        protocol = "verified" if "verified" in data.lower() else "legacy"
    else:
        files, protocol = _wise_files(Path(data))
        rows = [row for f in files for row in json_items(f)]
        root = files[0].parent.resolve()
    items = []
    for where, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{where}: each record must be a JSON object.")
        prompt_id = row.get("prompt_id")
        if (
            isinstance(prompt_id, bool)
            or not isinstance(prompt_id, int | str)
            or not str(prompt_id).isdigit()
        ):
            raise InputError(f"{where}: prompt_id: must be a positive integer, got {prompt_id!r}.")
        items.append(
            EvalItem(
                benchmark="wise",
                id=str(int(prompt_id)),
                category=str(row.get("Category") or ""),
                prompt=text_field(row, ("Prompt",), where),
                raw=row,
                root=str(root),
                protocol=protocol,
                where=where,
            )
        )
    items.sort(key=lambda item: int(item.id))
    return unique(items, data)
