"""The run store of a batch: one folder per request and a journal of finished requests.

``OUT/requests/<id>/`` holds each request's ``trace.json`` and images (written atomically as they are
made); ``OUT/journal.jsonl`` gets one appended, fsynced line per finished request; ``OUT/batch.json``
records the input order and the settings, so a restart with different settings is refused instead of
silently mixing two runs.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.types import Trace

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

    def finished(self) -> dict[str, str]:
        """Request id -> final status, from the journal (a torn last line from a crash is ignored)."""
        path = self.root / JOURNAL
        done: dict[str, str] = {}
        if not path.is_file():
            return done
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[entry["id"]] = entry["status"]
        return done

    def mark(self, request_id: str, status: str) -> None:
        line = json.dumps({"id": request_id, "status": status}) + "\n"
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            with (self.root / JOURNAL).open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())

    def traces(self) -> dict[str, Trace]:
        found: dict[str, Trace] = {}
        for path in sorted((self.root / REQUESTS).glob("*/trace.json")):
            found[path.parent.name] = Trace.model_validate_json(path.read_text(encoding="utf-8"))
        return found
