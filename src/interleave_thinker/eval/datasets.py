"""Benchmark items, from local files or a Hugging Face dataset: the item every benchmark reads its data
into, and the readers a benchmark's own reader (``eval/benchmarks/<name>/data.py``) builds on.

API (what generation and the scorers use)::

    items = benchmarks.load_items(name, data)   # data: a local path or "hf:ID[:split]"
    item.benchmark   # the benchmark's name (its loader sets it)
    item.id          # str, safe as a file name (the benchmark's own id field)
    item.category    # the benchmark's category field
    item.prompt      # the request text (the benchmark's prompt or instruction field)
    item.images      # input image paths, absolute (an editing benchmark's image to edit; others: ())
    item.raw         # the whole record as loaded, every field, for the scorers (rubrics, references, ...)
    item.root        # folder that relative paths of ``raw`` resolve against (None when there is none)
    item.protocol    # which of a benchmark's protocols the data belongs to, when it says; else None
    item.path("reference_img")   # a path field of ``raw`` resolved against ``root`` (None when absent/null)
    select(items, limit=N, shard=(i, n))          # runtime.batch_inputs, as ``batch`` selects

``hf:ID[:split]`` loads through ``datasets`` (offline only from its cache; without ``:split`` the ``test``
split, else the first); images stored in a dataset are written once as PNG files under
``<cache home>/eval-data`` so every item carries paths. Absent fields stay absent in ``raw``.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.backends.hub_datasets import load_hf_dataset
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import cache_home, write_atomic
from interleave_thinker.runtime.batch_inputs import read_json_list, read_records, select

MAX_PROMPT_CHARS = 20_000
MAX_NAME_CHARS = 160
_UNSAFE_NAME = re.compile(r"[/\\\x00-\x1f]")


@dataclass(frozen=True)
class EvalItem:
    """One benchmark item; ``raw`` keeps the record as loaded so scorers can read any field."""

    benchmark: str
    id: str
    category: str
    prompt: str
    images: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    root: str | None = None
    protocol: str | None = None
    where: str = ""

    def path(self, name: str) -> Path | None:
        """The path field ``name`` of ``raw`` resolved against ``root``; None when absent or null."""
        value = self.raw.get(name)
        if not isinstance(value, str) or not value.strip():
            return None
        path = Path(value)
        return path if path.is_absolute() or self.root is None else Path(self.root) / path


def safe_name(value: Any, where: str, field_name: str) -> str:
    text = str(value).strip() if value is not None else ""
    if not text or text in (".", "..") or _UNSAFE_NAME.search(text) or len(text) > MAX_NAME_CHARS:
        raise InputError(
            f"{where}: {field_name}: {text[:60]!r} cannot be used as a file name "
            f"(non-empty, no '/', '\\' or control characters, at most {MAX_NAME_CHARS} characters)."
        )
    return text


def text_field(row: dict[str, Any], names: Sequence[str], where: str) -> str:
    for name in names:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            if len(value) > MAX_PROMPT_CHARS:
                raise InputError(f"{where}: {name}: longer than {MAX_PROMPT_CHARS} characters.")
            return value
    raise InputError(f"{where}: {names[0]}: missing or empty.")


def json_items(path: Path) -> list[tuple[str, Any]]:
    """The records of a JSON list file, whatever its suffix, each with where it came from."""
    return [(f"{path}: item {i}", row) for i, row in enumerate(read_json_list(path), start=1)]


def _read_records(path: Path) -> list[tuple[str, Any]]:
    """Records of a .json list, .jsonl or .parquet file, each with where it came from."""
    return read_records(path, (".json", ".jsonl", ".parquet"))


# --- Hugging Face -------------------------------------------------------------------------------


def _hf_dataset(spec: str) -> tuple[str, str, Any]:
    name, _, split = spec.removeprefix("hf:").partition(":")
    try:
        loaded = load_hf_dataset(name, split)
    except Exception as exc:  # the hub raises many kinds; being offline without a cache is the common one
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise InputError(
            f"Dataset '{name}' could not be loaded ({type(exc).__name__}: {first}). Offline, a dataset must "
            "already be in the Hugging Face cache: load it once online (unset HF_HUB_OFFLINE), or pass the "
            "official local files with --data PATH."
        ) from None
    if split:
        return name, split, loaded
    splits = list(loaded.keys())
    chosen = "test" if "test" in splits else splits[0]
    return name, chosen, loaded[chosen]


def _materialise(value: Any, folder: Path, stem: str) -> Any:
    """A dataset image (PIL image or ``{"bytes", "path"}``) written once as a file; other values unchanged."""
    data: bytes | None = None
    if isinstance(value, dict) and isinstance(value.get("bytes"), bytes | bytearray):
        data = bytes(value["bytes"])
    elif hasattr(value, "save") and hasattr(value, "size"):
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        data = buffer.getvalue()
    if data is None:
        return value.get("path") if isinstance(value, dict) and "path" in value else value
    target = folder / f"{stem}-{hashlib.sha256(data).hexdigest()[:16]}.png"
    if not target.is_file():
        write_atomic(target, data)
    return str(target)


def hf_records(spec: str) -> tuple[list[tuple[str, dict[str, Any]]], Path]:
    name, split, dataset = _hf_dataset(spec)
    folder = cache_home() / "eval-data" / re.sub(r"[^A-Za-z0-9._-]+", "_", name) / split
    records = []
    for position, row in enumerate(dataset, start=1):
        stem = f"row{position:06d}"
        record = {key: _materialise(value, folder, f"{stem}-{key}") for key, value in dict(row).items()}
        records.append((f"{spec}: row {position}", record))
    return records, folder


def _records(data: str) -> tuple[list[tuple[str, dict[str, Any]]], Path | None]:
    if data.startswith("hf:"):
        return hf_records(data)
    path = Path(data)
    if not path.is_file():
        raise InputError(f"--data {data}: no such file.")
    rows = _read_records(path)
    for where, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{where}: each record must be a JSON object.")
    return rows, path.parent.resolve()


# --- the readers a benchmark's own reader builds on ---------------------------------------------


def load_questions(data: str, name: str, category: str) -> list[EvalItem]:
    """Question rows (UEval's shape): ``id``, ``prompt``, the ``category`` field (or ``<category>_type``),
    everything else (rubrics, ``question_type``) kept in ``raw``; each item under the benchmark ``name``."""
    rows, root = _records(data)
    items = []
    for where, row in rows:
        fallback = f"{category}_type"
        task = row.get(category) if row.get(category) not in (None, "") else row.get(fallback)
        items.append(
            EvalItem(
                benchmark=name,
                id=safe_name(row.get("id"), where, "id"),
                category=str(task or ""),
                prompt=text_field(row, ("prompt",), where),
                raw=row,
                root=str(root) if root else None,
                where=where,
            )
        )
    return unique(items, data)


def unique(items: list[EvalItem], data: str) -> list[EvalItem]:
    seen: dict[str, str] = {}
    for item in items:
        if item.id in seen:
            raise InputError(f"{item.where}: id '{item.id}' already used at {seen[item.id]}.")
        seen[item.id] = item.where
    if not items:
        raise InputError(f"--data {data} holds no items.")
    return items


def choose_items(
    items: list[EvalItem],
    *,
    ids: tuple[str, ...] | None = None,
    limit: int | None = None,
    shard: tuple[int, int] | None = None,
) -> list[EvalItem]:
    """``--ids`` (in the data's order; an unknown id is an error), then ``--limit`` and ``--shard`` as
    ``batch`` selects."""
    if ids is not None:
        known = {item.id for item in items}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise InputError(f"--ids: {', '.join(unknown[:5])}: not an item id of --data.")
        wanted = set(ids)
        items = [item for item in items if item.id in wanted]
    return select(items, limit=limit, shard=shard)
