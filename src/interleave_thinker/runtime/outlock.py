"""One process at a time per output folder.

Two batches (or runs) on one ``--out`` would both do all the work and write duplicate journal lines.
The lock is an ``fcntl`` lock on ``OUT/.lock``: the kernel drops it when its process dies, however it
dies, so a lock left by a dead process is simply taken over; the file holds the owner's pid only to
name it in the error.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import LOCK_FILE


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for this process; another live process holding it is an immediate, clear error."""
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise InputError(
                f"{folder} is in use by another interleave-thinker process (pid {owner}); wait for it "
                "to finish or stop it, or use another --out."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
                path.unlink()  # a command that failed before writing anything leaves no folder behind
                folder.rmdir()
    finally:
        os.close(fd)  # closing drops the lock
