"""RISEBench's data: a folder holding ``data_sample.json`` / ``data_total.json`` / ``data.json`` with image
paths relative to it, the JSON file itself, or ``hf:ID[:split]`` (the 64-sample files lack ``subtask``,
``reasoning_img``, ``consistency_free``, ``reasoning_wo_ins``: absent fields stay absent in ``raw``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.datasets import EvalItem, hf_records, json_items, safe_name, text_field, unique

FILES = ("data_total.json", "data_sample.json", "data.json")


def _rise_file(path: Path) -> Path:
    if path.is_file():
        return path
    for name in FILES:
        if (path / name).is_file():
            return path / name
    raise InputError(
        f"--data {path}: no RISEBench data file ({', '.join(FILES)}) there; give the folder that holds one."
    )


def load(data: str) -> list[EvalItem]:
    """RISEBench samples: ``index``, ``category``, ``instruction``, ``image``; optional fields stay in ``raw``."""
    if data.startswith("hf:"):
        rows, root = hf_records(data)
    else:
        file = _rise_file(Path(data))
        rows, root = json_items(file), file.parent.resolve()
    items = []
    for where, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{where}: each record must be a JSON object.")
        item = EvalItem(
            benchmark="rise",
            id=safe_name(row.get("index"), where, "index"),
            category=safe_name(row.get("category"), where, "category"),
            prompt=text_field(row, ("instruction",), where),
            raw=row,
            root=str(root) if root else None,
            where=where,
        )
        image = item.path("image")
        if image is None:
            raise InputError(f"{where}: image: missing; RISEBench samples edit an input image.")
        items.append(replace(item, images=(str(image.resolve()),)))
    return unique(items, data)
