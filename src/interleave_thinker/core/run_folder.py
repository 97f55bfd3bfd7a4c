"""The layout of a run folder, and the one way its trace is serialised and read back.

A run folder (``run --out``, each ``requests/<id>/`` of a batch)::

    trace.json      the Trace, rewritten (temp file + rename) after every call
    images/         input copies and every attempt's image, each written once as it is made
    document.md     the pages, rendered from the trace when the run ends
    index.html
    .lock           held by the one process working in the folder (``runtime/outlock.py``)

A batch folder adds ``batch.json`` (ids and settings), ``journal.jsonl`` (one line per finished
request), ``requests/<id>/`` and the outputs ``summary.json``, ``results.json``, ``report.html``.

Every file is written through :func:`interleave_thinker.core.paths.write_atomic` (a temp file
``.NAME.XXXX.tmp`` in the same folder, fsynced, renamed; modes follow the umask), so a kill leaves at
most such a temp file, which :func:`remove_partial_writes` clears.

``trace.json`` carries ``schema_version``. Reading checks it: an older known version is migrated on
read (:data:`MIGRATIONS`), a newer or unknown one is refused with :class:`TraceVersionError`, since a
reader that guessed could drop fields a newer writer relies on, and a resume would then rewrite them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import TraceVersionError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.types import SCHEMA_VERSION, Trace
from interleave_thinker.core.untrusted import ImageLimits, check_image, inside, load_json, read_bounded

TRACE_FILE = "trace.json"
IMAGES_DIR = "images"
DOCUMENT_MD = "document.md"
INDEX_HTML = "index.html"
PAGES = (DOCUMENT_MD, INDEX_HTML)
LOCK_FILE = ".lock"

MANIFEST = "batch.json"
JOURNAL = "journal.jsonl"
REQUESTS = "requests"
SUMMARY = "summary.json"
RESULTS = "results.json"
REPORT = "report.html"

PARTIAL_WRITE = ".*.tmp"
"""The name of a write a kill interrupted (``write_atomic``'s temp file; its rename never happened)."""


def request_dir(batch_root: Path, request_id: str) -> Path:
    """A batch request's run folder."""
    return batch_root / REQUESTS / request_id


def trace_path(folder: Path) -> Path:
    return folder / TRACE_FILE


def image_path(folder: Path, name: str) -> Path:
    return folder / IMAGES_DIR / name


def run_image(run: Path, name: str, *, what: str, limits: ImageLimits | None = None) -> Path:
    """The image ``name`` of a trace of the run folder ``run``, checked as data (`data build`, `data
    export`): a relative name inside ``images/`` that stays in ``run`` with links followed, and a real
    image within ``limits``; else :class:`~interleave_thinker.core.untrusted.UnsafeFile` naming ``what``."""
    path = inside(run / IMAGES_DIR, name, what=what, root=run)
    check_image(path, limits or ImageLimits(), what=what)
    return path


def has_pages(folder: Path) -> bool:
    """True when both pages are there (a kill between the last trace write and the pages leaves none)."""
    return all((folder / name).is_file() for name in PAGES)


def remove_partial_writes(folder: Path) -> None:
    """Delete the temp files of writes a crash interrupted, anywhere below ``folder``."""
    for leftover in folder.rglob(PARTIAL_WRITE) if folder.is_dir() else []:
        leftover.unlink()


def trace_json(trace: Trace) -> str:
    """The text of ``trace.json`` (every writer uses this, so every trace on disk looks alike)."""
    return trace.model_dump_json(indent=2)


def write_trace(folder: Path, trace: Trace) -> None:
    write_atomic(trace_path(folder), trace_json(trace))


# --- reading, with the schema version checked ----------------------------------------------------------


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 records each image step's planned prompt (the critic's original instruction).

    Schema 1 left it to be derived again from the plan step: its prompt, else its instruction, else (a
    text answer generated as an image, ``loop.text_steps: generate``) its auxiliary text.
    """
    for step in data.get("steps") or []:
        if not isinstance(step, dict) or step.get("kind") != "image" or "planned_prompt" in step:
            continue
        plan_step = step.get("step")
        if not isinstance(plan_step, dict):
            continue  # not a valid trace: validation says so
        for key in ("prompt", "instruction", "auxiliary_text"):
            if plan_step.get(key) is not None:
                step["planned_prompt"] = plan_step[key]
                break
    return data


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 adds ``Attempt.scores`` (judge scores made in the run); a schema-2 trace has none, which
    reads as None. The version exists so that an older reader refuses such a trace instead of taking its
    unknown field for a broken trace."""
    return data


def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 4 records the seed of every planner and critic call (``PlannerRecord.seeds``,
    ``Attempt.critic_seeds``); a schema-3 trace has none, which reads as empty lists."""
    return data


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
}
"""Version N -> the function that turns a version-N trace into version N + 1."""
SUPPORTED_VERSIONS = (*sorted(MIGRATIONS), SCHEMA_VERSION)


def check_version(path: Path, version: object) -> int:
    """``version`` when this code reads it, else :class:`TraceVersionError` naming the file and the fix."""
    if type(version) is int and version in SUPPORTED_VERSIONS:
        return version
    newer = type(version) is int and version > SCHEMA_VERSION
    raise TraceVersionError(
        f"{path}: trace schema_version {version!r} is {'newer than' if newer else 'unknown to'} this "
        f"interleave-thinker, which reads versions {', '.join(map(str, SUPPORTED_VERSIONS))} (older ones "
        "are migrated on read); upgrade interleave-thinker (pip install -U interleave-thinker) to read it."
    )


def migrate(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a decoded ``trace.json``) brought to :data:`SCHEMA_VERSION`; see :func:`check_version`."""
    version = check_version(path, data.get("schema_version", 1))  # schema 1 was the first one written
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
    data["schema_version"] = SCHEMA_VERSION
    return data


def load_trace(path: Path, max_bytes: int | None = None) -> Trace:
    """The trace in ``path``, migrated to the current schema.

    Raises OSError (missing, unreadable), ValueError (not JSON, nested deeper than
    :data:`~interleave_thinker.core.untrusted.MAX_JSON_DEPTH`, or not a valid trace: pydantic's
    ValidationError is one), :class:`TraceVersionError` (a version this code does not read) or, with
    ``max_bytes`` (readers of data: `data build`, `data export`), an
    :class:`~interleave_thinker.core.untrusted.UnsafeFile` for a larger file.
    """
    raw = path.read_bytes() if max_bytes is None else read_bounded(path, max_bytes, what="trace")
    data = load_json(raw)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return Trace.model_validate(migrate(path, data))


def read_trace(path: Path) -> Trace | None:
    """The trace in ``path``, or None when it is missing or cannot be read; a version this code does
    not read is still an error, so that no caller takes a newer trace for a broken one and replaces it."""
    try:
        return load_trace(path)
    except (OSError, ValueError):
        return None
