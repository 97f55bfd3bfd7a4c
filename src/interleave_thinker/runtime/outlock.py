"""One process at a time per output folder.

Two batches (or runs) on one ``--out`` would both do all the work and write duplicate journal lines.
The lock is a native ``filelock.UnixFileLock`` (``flock``) on ``OUT/.lock``: the kernel drops it when its
process dies, however it dies, so a lock left by a dead process is simply taken over. No soft fallback
(a marker file would outlive a killed holder); the file holds the owner's pid only to name it in the error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import Timeout, UnixFileLock

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import confine
from interleave_thinker.core.run_folder import LOCK_FILE


def _write_pid(fd: int) -> None:
    """Called by filelock with the locked descriptor: record who holds the folder."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _owner(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")[:32].strip() or "unknown"
    except OSError:
        return "unknown"


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for this process; another live process holding it is an immediate, clear error."""
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    confine(folder)  # the command's files are never written through a link out of its folder
    if path.is_symlink():  # the lock opens and truncates its file: never the file a link points at
        raise InputError(
            f"{path} is a symbolic link; remove it (the lock file is made anew) or use another --out."
        )
    lock = UnixFileLock(path, blocking=False, preserve_lock_file=True, on_acquired=_write_pid)
    try:
        lock.acquire()
    except Timeout:
        raise InputError(
            f"{folder} is in use by another interleave-thinker process (pid {_owner(path)}); wait for it "
            "to finish or stop it, or use another --out."
        ) from None
    try:
        yield
    finally:
        try:
            if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
                path.unlink()  # a command that failed before writing anything leaves no folder behind
                folder.rmdir()
        finally:
            lock.release()
