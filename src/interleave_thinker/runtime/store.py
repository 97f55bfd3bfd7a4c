"""The run store of a batch: one folder per request and a journal of finished requests.

``OUT/requests/<id>/`` holds each request's ``trace.json`` and images (written atomically as they are
made); ``OUT/journal.jsonl`` gets one appended, fsynced line per finished request (a torn last line a
crash left is cut back to the last newline before the first append, and reported); ``OUT/batch.json``
records the input order and the settings, so a restart with different settings is refused instead of
silently mixing two runs. The journal is not trusted over the disk: a request it calls succeeded is
checked once per run (:func:`~interleave_thinker.runtime.resume.damage`) and, when its files fail the
check, counted as not finished (:meth:`RunStore.damage` says why), with one warning naming the file. File names are the run folder's layout (``core/run_folder.py``); what a
restart does with them is decided in ``runtime/resume.py``.

Nothing is read, written or cleared through a symbolic link planted in ``OUT`` that leads out of it
(:func:`~interleave_thinker.core.paths.confine`): such a request folder fails that request with one
line, such a journal or manifest stops the batch before it starts.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError, TraceVersionError
from interleave_thinker.core.paths import check_folder, confine, write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR, JOURNAL, MANIFEST, REQUESTS, TRACE_FILE, read_trace
from interleave_thinker.core.run_folder import request_dir as batch_request_dir
from interleave_thinker.core.types import Request, Trace
from interleave_thinker.core.untrusted import rows_by_id
from interleave_thinker.runtime.failures import clean_text, one_line
from interleave_thinker.runtime.file_writes import off_loop
from interleave_thinker.runtime.resume import (
    aside_path,
    changed_requests,
    damage,
    merged_manifest,
    read_state,
)

logger = logging.getLogger(__name__)


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        confine(root)
        self._lock = threading.Lock()
        self._append_lock = threading.Lock()
        self._journal: tuple[tuple[int, int, int] | None, dict[str, dict[str, Any]]] | None = None
        self._checked: dict[str, str | None] = {}
        """Request id -> why its files fail the disk check (None: intact), for succeeded requests checked."""
        self._tail_checked = False

    def request_dir(self, request_id: str) -> Path:
        """``OUT/requests/<id>/``; :class:`InputError` when it (or its ``images/``, or ``requests/``) is
        a symbolic link out of ``OUT``, so nothing of the request is read, cleared or written there."""
        folder = batch_request_dir(self.root, request_id)
        check_folder(folder / IMAGES_DIR)
        return folder

    def open(self, manifest: dict[str, Any], *, resume: bool, accept_changed: bool = False) -> None:
        """Start or continue a batch in ``root``; a different manifest or ``resume=False`` on a used folder is an error.

        A request whose input changed since the batch started is refused, or with ``accept_changed`` run
        again from the start: its earlier folder moves aside (never deleted) and its journal line is not
        trusted (:meth:`damage` says why)."""
        for name in (MANIFEST, JOURNAL):
            if (self.root / name).is_symlink():
                raise InputError(
                    f"{self.root / name} is a symbolic link; a batch reads and writes its own {name} only: "
                    "remove the link or choose another --out."
                )
        journal = self.root / JOURNAL
        if journal.exists() and not journal.is_file():
            raise InputError(
                f"{journal} is not a file, so finished requests cannot be recorded; run with --fresh to move "
                f"the earlier batch aside (to {aside_path(self.root)}) and start over, or use another --out."
            )
        path = self.root / MANIFEST
        merged = merged_manifest(path, manifest, resume=resume, accept_changed=accept_changed)
        changed = changed_requests(read_state(path), manifest) if path.exists() else []
        if changed:
            self._set_aside_changed(changed)
        write_atomic(path, json.dumps(merged, indent=2, ensure_ascii=False))

    def _set_aside_changed(self, changed: list[str]) -> None:
        """``--accept-changed-input``: each changed request's folder moves aside; the request runs again."""
        target = aside_path(self.root) / REQUESTS
        for request_id in changed:
            folder = self.request_dir(request_id)
            reason = "its input changed (--accept-changed-input); it runs again from the start"
            if folder.exists():
                target.mkdir(parents=True, exist_ok=True)
                folder.rename(target / request_id)
                reason += f", its earlier outputs are in {target / request_id}"
            logger.warning("request %s: %s.", one_line(request_id, 80), reason)
            with self._lock:
                self._checked[request_id] = reason

    def manifest(self) -> dict[str, Any]:
        path = self.root / MANIFEST
        return read_state(path) if path.is_file() else {}

    def journal(self) -> dict[str, dict[str, Any]]:
        """Request id -> its last journal entry (a torn or foreign line is ignored).

        Read once and then kept up to date by :meth:`mark`: the scheduler asks for every request it
        starts, and parsing a journal of thousands of lines each time made a batch quadratic. The file's
        size, mtime and inode tell when someone else changed it; it is then read again."""
        with self._lock:
            return {i: dict(entry) for i, entry in self._entries().items()}

    def _entries(self) -> dict[str, dict[str, Any]]:
        """The kept journal, read again when the file changed; to be read under ``_lock`` (``mark``
        adds to it from a writer thread)."""
        path = self.root / JOURNAL
        if self._journal is None or self._journal[0] != _identity(path):
            self._journal = (_identity(path), rows_by_id(path))
        return self._journal[1]

    def finished(self) -> dict[str, str]:
        """Request id -> final status, from the journal (a torn last line from a crash is ignored), less
        the succeeded requests whose files fail the disk check (:meth:`damage`): those run again."""
        with self._lock:
            statuses = {i: str(entry.get("status")) for i, entry in self._entries().items()}
            unchecked = [i for i, s in statuses.items() if s == "succeeded" and i not in self._checked]
        for request_id in unchecked:
            self._check(request_id)
        with self._lock:
            return {i: s for i, s in statuses.items() if self._checked.get(i) is None}

    def damage(self, request_id: str) -> str | None:
        """Why the journal's succeeded request ``request_id`` cannot be kept as its files are on disk
        (None when intact, not checked, or not succeeded): :meth:`finished` leaves it out, and the
        scheduler reopens its folder with this reason."""
        with self._lock:
            return self._checked.get(request_id)

    def _check(self, request_id: str) -> None:
        try:
            reason = damage(self.request_dir(request_id))
        except InputError:  # a link out of OUT: the request's own run reports it
            reason = None
        if reason is not None:
            logger.warning(
                "request %s finished earlier, but %s; running it again.", one_line(request_id, 80), reason
            )
        with self._lock:
            self._checked[request_id] = reason

    def status(self, request_id: str) -> str | None:
        """The journal's last status of one request (None when not there): ``finished().get(id)``
        without building the whole mapping."""
        entry = self.entry(request_id)
        return None if entry is None else str(entry.get("status"))

    def entry(self, request_id: str) -> dict[str, Any] | None:
        """The journal's last line of one request (its status and, for a failure, the error), or None."""
        with self._lock:
            entry = self._entries().get(request_id)
            return None if entry is None else dict(entry)

    def mark(self, request_id: str, status: str, error: str | None = None) -> None:
        entry = {"id": request_id, "status": status} | ({"error": one_line(error)} if error else {})
        line = json.dumps(entry) + "\n"
        off_loop(lambda: self._append(request_id, entry, line))

    def _append(self, request_id: str, entry: dict[str, Any], line: str) -> None:
        """One fsynced line; the kept journal takes it when it was current (the cache lock is not held
        while the disk is waited on: the loop thread reads the journal)."""
        path = self.root / JOURNAL
        with self._append_lock:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, _APPEND, 0o666)  # never through a link planted at the journal's name
            if not self._tail_checked:
                _cut_torn_tail(fd, path)
                self._tail_checked = True
            before = _identity(path)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            after = _identity(path)
        with self._lock:
            self._checked.pop(request_id, None)  # just written: intact
            if self._journal is not None and self._journal[0] == before:
                self._journal[1][request_id] = entry
                self._journal = (after, self._journal[1])
            else:
                self._journal = None

    def traces(self) -> dict[str, Trace]:
        """Every request's trace; an unreadable one, or a failure with no trace at all (e.g. a full disk or
        an id that cannot be a folder name), appears as a failed trace carrying the reason."""
        found: dict[str, Trace] = {}
        for path in sorted((self.root / REQUESTS).glob(f"*/{TRACE_FILE}")):
            try:
                check_folder(path.parent)
            except InputError as exc:  # a link out of OUT: its files are not this batch's
                found[path.parent.name] = failed_trace(path.parent.name, "", str(exc))
                continue
            found[path.parent.name] = _trace_or_reason(path)
        for request_id, entry in self.journal().items():
            if request_id not in found and entry.get("status") == "failed":
                found[request_id] = failed_trace(request_id, "", str(entry.get("error") or "unknown"))
        return found


_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _cut_torn_tail(fd: int, path: Path) -> None:
    """Cut a torn last line (a crash during an append) back to the last newline, so the next line is not
    glued onto it; the bytes cut are reported in one warning."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    keep, chunk = 0, 1 << 16
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    cut = os.pread(fd, min(size - keep, 200), keep)
    os.ftruncate(fd, keep)
    os.fsync(fd)
    logger.warning(
        "%s: cut %d bytes of a torn last line (a write a crash interrupted): %r",
        path,
        size - keep,
        cut.decode("utf-8", errors="replace"),
    )


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells that a file changed: its size, mtime and inode (None when there is no file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _trace_or_reason(path: Path) -> Trace:
    """The trace in ``path``, or a failed trace saying why it cannot be read (a newer schema included)."""
    try:
        trace = read_trace(path)
    except TraceVersionError as exc:
        return failed_trace(path.parent.name, "", str(exc))
    return trace or failed_trace(
        path.parent.name, "", f"{path} cannot be read; resume the batch to run the request again."
    )


def failed_trace(request_id: str, prompt: str, reason: str, task: str | None = None) -> Trace:
    """A trace that only says a request failed and why (when its own trace cannot be had)."""
    trace = Trace(request=Request(text=clean_text(prompt), id=clean_text(request_id), task=task))
    trace.status, trace.error = "failed", one_line(reason)
    return trace
