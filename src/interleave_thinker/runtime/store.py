"""The run store of a batch: one folder per request and a journal of finished requests.

``OUT/requests/<id>/`` holds each request's ``trace.json`` and images (written atomically as they are
made); ``OUT/journal.jsonl`` gets one appended, fsynced line per finished request; ``OUT/batch.json``
records the input order and the settings, so a restart with different settings is refused instead of
silently mixing two runs.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.types import Request, Trace
from interleave_thinker.runtime.failures import clean_text, one_line
from interleave_thinker.runtime.outlock import LOCK_FILE

MANIFEST = "batch.json"
JOURNAL = "journal.jsonl"
REQUESTS = "requests"


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    def request_dir(self, request_id: str) -> Path:
        return self.root / REQUESTS / request_id

    def open(self, manifest: dict[str, Any], *, resume: bool) -> None:
        """Start or continue a batch in ``root``; a different manifest or ``resume=False`` on a used folder is an error."""
        path = self.root / MANIFEST
        if path.exists():
            if not resume:
                raise InputError(
                    f"{self.root} already holds a batch; use --resume to continue it or another --out."
                )
            previous = json.loads(path.read_text(encoding="utf-8"))
            if previous.get("settings") != manifest.get("settings"):
                raise InputError(
                    f"{path} was written with other settings (backends, loop or generation); "
                    "resume with the same options, or use another --out."
                )
            merged = list(dict.fromkeys([*previous.get("ids", []), *manifest.get("ids", [])]))
            manifest = {**manifest, "ids": merged}
        write_atomic(path, json.dumps(manifest, indent=2, ensure_ascii=False))

    def manifest(self) -> dict[str, Any]:
        path = self.root / MANIFEST
        return dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else {}

    def journal(self) -> dict[str, dict[str, Any]]:
        """Request id -> its last journal entry (a torn or foreign line is ignored)."""
        path = self.root / JOURNAL
        done: dict[str, dict[str, Any]] = {}
        if not path.is_file():
            return done
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                done[entry["id"]] = entry
        return done

    def finished(self) -> dict[str, str]:
        """Request id -> final status, from the journal (a torn last line from a crash is ignored)."""
        return {i: str(entry.get("status")) for i, entry in self.journal().items()}

    def mark(self, request_id: str, status: str, error: str | None = None) -> None:
        entry = {"id": request_id, "status": status} | ({"error": one_line(error)} if error else {})
        line = json.dumps(entry) + "\n"
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            with (self.root / JOURNAL).open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())

    def traces(self) -> dict[str, Trace]:
        """Every request's trace; an unreadable one, or a failure with no trace at all (e.g. a full disk or
        an id that cannot be a folder name), appears as a failed trace carrying the reason."""
        found: dict[str, Trace] = {}
        for path in sorted((self.root / REQUESTS).glob("*/trace.json")):
            trace = read_trace(path)
            found[path.parent.name] = trace or failed_trace(
                path.parent.name, "", f"{path} cannot be read; resume the batch to run the request again."
            )
        for request_id, entry in self.journal().items():
            if request_id not in found and entry.get("status") == "failed":
                found[request_id] = failed_trace(request_id, "", str(entry.get("error") or "unknown"))
        return found

    def reopen(self, request_id: str, reason: str) -> None:
        """Make a failed request run again: continue after its last good step, or start over."""
        reopen_folder(self.request_dir(request_id), reason)


def reopen_folder(folder: Path, reason: str) -> None:
    """Make the failed run in ``folder`` run again: keep its plan and good steps, or clear it."""
    trace = read_trace(folder / "trace.json")
    if trace is None or trace.planner.plan is None:  # nothing worth keeping: no plan, or unreadable
        for child in folder.iterdir() if folder.is_dir() else []:
            if child.name != LOCK_FILE:  # the lock of a `run` folder stays with its holder
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        return
    good = []
    for step in trace.steps:
        if not step.complete or (step.kind == "image" and step.accepted_image is None):
            break
        good.append(step)
    trace.steps, trace.status, trace.error = good, "running", None
    trace.warnings.append(f"Run again after a failure: {one_line(reason)}")
    write_atomic(folder / "trace.json", trace.model_dump_json(indent=2))


def reopen_if_failed(folder: Path) -> None:
    """``run --resume`` on a failed run runs it again, as a resumed batch does with its failed requests."""
    trace = read_trace(folder / "trace.json")
    if trace is not None and trace.status == "failed":
        reopen_folder(folder, trace.error or "unknown")


def read_trace(path: Path) -> Trace | None:
    """The trace in ``path``, or None when it is missing or cannot be read."""
    try:
        return Trace.model_validate_json(path.read_bytes())
    except (OSError, ValueError, ValidationError):
        return None


def failed_trace(request_id: str, prompt: str, reason: str, task: str | None = None) -> Trace:
    """A trace that only says a request failed and why (when its own trace cannot be had)."""
    trace = Trace(request=Request(text=clean_text(prompt), id=clean_text(request_id), task=task))
    trace.status, trace.error = "failed", one_line(reason)
    return trace
