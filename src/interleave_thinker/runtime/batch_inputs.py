"""Batch inputs: JSONL, JSON list, CSV, Parquet or a Hugging Face dataset, normalised to `BatchItem`s.

Fields: ``id`` (generated from the position when absent), ``prompt`` (aliases ``user_input``,
``instruction``, ``Prompt``), optional ``images`` (a list, a JSON list in a string, or ``;``-separated;
relative paths resolve against the input file's folder) and ``task``. Problems name the file and the
line (or item) and the field. Every string is cleaned here (``core.sanitize.clean_text``), so
nothing read from the input can make a trace unwritable later. An id that cannot be a folder name
does not stop the batch: that request is recorded as failed with the reason and the others run.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from interleave_thinker.backends.hub_datasets import load_hf_dataset
from interleave_thinker.core.errors import InputError
from interleave_thinker.runtime.failures import clean_text, one_line

PROMPT_FIELDS = ("prompt", "user_input", "instruction", "Prompt")
MAX_ID_BYTES = 200
T = TypeVar("T")


@dataclass(frozen=True)
class BatchItem:
    id: str
    prompt: str
    images: tuple[str, ...] = ()
    task: str | None = None
    where: str = ""
    problem: str | None = None
    """Why this request cannot run (e.g. its id cannot be a folder name); it is recorded as failed."""


def fingerprint(item: BatchItem) -> list[str]:
    """Short digests of a request's prompt, images and task, which a batch folder records per id so a
    resume can tell (and name) a request that changed in the input since the batch started."""
    parts = (item.prompt, json.dumps(list(item.images)), item.task or "")
    return [hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:12] for part in parts]


FINGERPRINT_FIELDS = ("prompt", "images", "task")
"""What each digest of :func:`fingerprint` covers, in order."""


def batch_manifest(source: str, items: list[BatchItem], settings: dict[str, Any]) -> dict[str, Any]:
    """A batch folder's ``batch.json``: the input, the ids in order, each request's fingerprint and the
    settings a resume must share (``runtime/resume.py::merged_manifest`` compares them)."""
    return {
        "input": source,
        "ids": [i.id for i in items],
        "requests": {i.id: fingerprint(i) for i in items},
        "settings": settings,
    }


def _images(value: Any, base: Path | None, where: str) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    if isinstance(value, str):
        text = value.strip()
        value = (
            json.loads(text) if text.startswith("[") else [p.strip() for p in text.split(";") if p.strip()]
        )
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: images: must be a list of paths.")
    value = [clean_text(v) for v in value]
    return tuple(str(base / v) if base is not None and not Path(v).is_absolute() else v for v in value)


def id_problem(item_id: str) -> str | None:
    """Why ``item_id`` cannot name a request folder, or None when it can."""
    if item_id in (".", "..") or "/" in item_id or "\\" in item_id:
        return "is a path, not a name"
    if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in item_id):
        return "holds control characters or lone surrogates"
    if len(item_id.encode("utf-8")) > MAX_ID_BYTES:
        return f"is longer than {MAX_ID_BYTES} bytes"
    return None


def _item(row: Any, position: int, where: str, base: Path | None) -> BatchItem:
    if not isinstance(row, dict):
        raise InputError(f"{where}: each record must be an object with a prompt.")
    prompt = next((row[k] for k in PROMPT_FIELDS if isinstance(row.get(k), str) and row[k].strip()), None)
    if prompt is None:
        raise InputError(f"{where}: prompt: missing (also accepted: {', '.join(PROMPT_FIELDS[1:])}).")
    raw_id = row.get("id")
    item_id = str(raw_id) if raw_id not in (None, "") else f"item-{position:05d}"
    problem = id_problem(item_id)
    reason = None
    if problem is not None:
        reason = (
            f"{where}: id: {one_line(item_id, 60)!r} cannot be used as a folder name ({problem}); "
            f"use at most {MAX_ID_BYTES} bytes without '/', '\\' or control characters."
        )
    task = row.get("task")
    return BatchItem(
        item_id,
        clean_text(prompt),
        _images(row.get("images"), base, where),
        clean_text(str(task)) if task else None,
        where,
        reason,
    )


RECORD_FORMATS = (".jsonl", ".json", ".csv", ".parquet")


def read_json_list(path: Path) -> list[Any]:
    """A ``.json`` file holding a list of records; problems name the file (and line) and the fix."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}).") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{path}: {one_line(str(exc), 120)}.") from None
    except OSError as exc:
        raise InputError(f"Cannot read {path}: {exc.strerror}.") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: must hold a JSON list of records.")
    return data


def _jsonl_rows(path: Path) -> list[tuple[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append((f"{path}:{number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not valid JSON ({exc.msg}).") from None
            except ValueError as exc:
                raise InputError(f"{path}:{number}: {one_line(str(exc), 120)}.") from None
    return rows


def read_records(path: Path, formats: tuple[str, ...] = RECORD_FORMATS) -> list[tuple[str, Any]]:
    """Records of a file in one of ``formats`` (suffixes of :data:`RECORD_FORMATS`), each with where it
    came from (``FILE:LINE``, ``FILE: item N``, ``FILE: row N``); the batch inputs and the benchmark
    data are read by this one function."""
    suffix = path.suffix.lower()
    if suffix not in formats:
        raise InputError(f"{path}: unknown input format '{suffix}'; use {', '.join(formats)} or hf:DATASET.")
    if suffix == ".jsonl":
        return _jsonl_rows(path)
    if suffix == ".json":
        return [(f"{path}: item {i}", row) for i, row in enumerate(read_json_list(path), start=1)]
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            return [(f"{path}:{n}", row) for n, row in enumerate(csv.DictReader(handle), start=2)]
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs pyarrow (`pip install pyarrow`).") from None
    return [(f"{path}: row {i}", row) for i, row in enumerate(pq.read_table(path).to_pylist(), start=1)]


def _hf_rows(spec: str) -> list[tuple[str, Any]]:
    name, _, split = spec.removeprefix("hf:").partition(":")
    try:
        dataset = load_hf_dataset(name, split or "test")
    except ModuleNotFoundError as exc:
        if exc.name == "datasets":
            raise InputError(
                "Hugging Face inputs need the `datasets` package (`pip install datasets`)."
            ) from None
        raise InputError(
            f"Dataset '{name}': its loader needs the package `{exc.name}`, which is not installed "
            f"(`pip install {exc.name}`)."
        ) from None
    except Exception as exc:  # the hub raises many kinds; offline ones are the common case
        raise _not_loaded(name, split, exc) from None
    return [(f"{spec}: row {i}", dict(row)) for i, row in enumerate(dataset, start=1)]


def _not_loaded(name: str, split: str, exc: Exception) -> InputError:
    """A dataset the hub could not give: offline and not cached, unknown, or failing in its own loader."""
    return InputError(
        f"Dataset '{name}' (split '{split or 'test'}') could not be loaded: {type(exc).__name__}: "
        f"{str(exc).splitlines()[0] if str(exc) else ''}. Offline, a dataset must already be in the Hugging "
        "Face cache: load it once online, or export it to JSONL."
    )


def read_batch_input(spec: str) -> list[BatchItem]:
    """Every record of the input, validated; duplicate ids are errors naming both places."""
    if spec.startswith("hf:"):
        rows, base = _hf_rows(spec), None
    else:
        path = Path(spec)
        if not path.is_file():
            raise InputError(f"Input file {path} does not exist.")
        rows, base = read_records(path), path.parent
    items: list[BatchItem] = []
    seen: dict[str, str] = {}
    for position, (where, row) in enumerate(rows, start=1):
        item = _item(row, position, where, base)
        if item.id in seen:
            raise InputError(f"{where}: id: '{item.id}' already used at {seen[item.id]}.")
        seen[item.id] = where
        items.append(item)
    if not items:
        raise InputError(f"{spec} holds no records.")
    return items


def parse_shard(value: str) -> tuple[int, int]:
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or int(count) < 1 or int(index) >= int(count):
        raise InputError(f"--shard {value!r}: write I/N with 0 <= I < N, e.g. 0/4.")
    return int(index), int(count)


def select(items: list[T], *, shard: tuple[int, int] | None = None, limit: int | None = None) -> list[T]:
    """``limit`` takes the first N records of the input; ``shard`` I/N keeps every N-th from I (batch
    inputs and benchmark items alike, so ``batch`` and ``eval generate`` shard the same way)."""
    chosen = items[:limit] if limit is not None else items
    if shard is not None:
        index, count = shard
        chosen = [item for position, item in enumerate(chosen) if position % count == index]
    return chosen
