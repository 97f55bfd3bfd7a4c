"""The counts of `data generate` on disk as the calls are made, so a killed run's calls reach the summary.

Why: the counts lived in memory and reached disk only in ``summary.json`` at the end of a run, so a run
killed with SIGKILL lost the calls it had made, which the servers saw (and bill). Each run of a batch
folder now keeps its own ledger, ``OUT/usage/run-NNNN-<tag>.json``, rewritten atomically and fsynced
(:func:`~interleave_thinker.runtime.file_writes.write_file`'s write, off the event loop) at two points of
every call: before it is sent (``calls``, ``images_in``: a call a kill interrupts was still seen by its
server) and after its reply (tokens, ``images_out``). The summary's ``usage`` is the sum of every ledger
of the folder, so a resumed run adds the killed run's calls.

Why one file per run and not one per request: a local model's call runs in an executor thread and a
micro-batched one in the batcher's thread, where the request it serves is not known; the per-role counts
are what the summary and the cost need. Writes are grouped: a call waits for a write that holds its
count, and calls in flight together share one write instead of queueing one write each.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import SUMMARY, remove_partial_writes
from interleave_thinker.datagen.generate_usage import ROLES, Usage, add_usage
from interleave_thinker.runtime.failures import failure_reason
from interleave_thinker.runtime.file_writes import off_loop

logger = logging.getLogger(__name__)
USAGE_DIR = "usage"
"""The ledgers' folder in a batch folder: one JSON file per run of `data generate`."""
EARLIER = "earlier.json"
"""The counts of a folder's runs from before the ledgers, taken from its summary once."""


class UsageLedger:
    """This run's per-role counts (:attr:`roles`), written to ``path`` whenever one of them changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.roles = {role: Usage(on_change=self._changed) for role in ROLES}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._version = self._written = 0

    @classmethod
    def open(cls, root: Path) -> UsageLedger:
        """A new ledger for a run in the batch folder ``root`` (the earlier runs' ledgers stay)."""
        folder = root / USAGE_DIR
        remove_partial_writes(folder)  # a ledger write a kill interrupted; the ledger it replaced is whole
        runs = list(folder.glob("run-*.json")) if folder.is_dir() else []
        if not runs:
            _adopt_summary(root)
        return cls(folder / f"run-{len(runs) + 1:04d}-{uuid.uuid4().hex[:8]}.json")

    def _changed(self) -> None:
        """Called after a count changed: returns once a write holding the change is on disk."""
        with self._lock:
            self._version += 1
            wanted = self._version
        off_loop(lambda: self._write(wanted))

    def _write(self, wanted: int) -> None:
        with self._write_lock:
            if self._written >= wanted:  # a write that began after this change already holds it
                return
            with self._lock:
                version = self._version
            counts = {role: usage.as_dict() for role, usage in self.roles.items()}
            write_atomic(self.path, json.dumps({"usage": counts}, indent=1) + "\n")
            self._written = version


def recorded_usage(root: Path) -> dict[str, dict[str, int]]:
    """The per-role counts of every run of the batch folder ``root``, killed runs included."""
    tables = []
    for path in sorted((root / USAGE_DIR).glob("*.json")):
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # written atomically: only a hand edit gets here
            logger.warning("usage ledger %s not read: %s", path, failure_reason(exc))
            continue
        tables.append(value.get("usage") if isinstance(value, dict) else None)
    return add_usage({role: {} for role in ROLES}, *tables)


def _adopt_summary(root: Path) -> None:
    """A folder whose runs predate the ledgers: its summary's counts become the ledger ``earlier.json``."""
    target = root / USAGE_DIR / EARLIER
    if target.exists():
        return
    try:
        summary: Any = json.loads((root / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    usage = summary.get("usage") if isinstance(summary, dict) else None
    if isinstance(usage, dict) and usage:
        write_atomic(target, json.dumps({"usage": add_usage(usage)}, indent=1) + "\n")
