"""Storage faults in one line: an ``OSError`` of the disk turned into a :class:`StorageError` that names
the path and the fix, and the up-front check of an output folder a command will write.

Why one table: disk full, no permission, a read-only file system or a file where a folder belongs
reached users as ``OSError: [Errno 28] No space left on device`` without the path, as
``PermissionError`` text, or only after a model had loaded. Each errno below has one message and one
exit code (2: the path given is wrong, choose another; 1: the disk is full, free space and run the same
command again, which resumes). ``docs/batch.md`` ("Resuming and faults") shows them.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from interleave_thinker.core.errors import StorageError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
FAULTS: dict[int, tuple[int, str, str]] = {
    errno.ENOSPC: (
        1,
        "no space left on the device",
        "free space there (or choose a folder on another disk), then run the same command again: "
        "finished work is kept and resumed",
    ),
    errno.EDQUOT: (
        1,
        "disk quota exceeded",
        "free space there (or choose a folder on another disk), then run the same command again: "
        "finished work is kept and resumed",
    ),
    errno.EACCES: (2, "permission denied", "choose a folder you may write to, or change its permissions"),
    errno.EPERM: (
        2,
        "operation not permitted",
        "choose a folder you may write to, or change its permissions",
    ),
    errno.EROFS: (2, "read-only file system", "choose a folder on a writable file system"),
    errno.ENOTDIR: (
        2,
        "a file stands where a folder is needed",
        "remove or rename that file, or choose another folder",
    ),
    errno.EEXIST: (
        2,
        "a file exists where a folder is needed",
        "remove or rename it, or choose another folder",
    ),
}
"""errno -> (exit code, what happened, the fix)."""


def storage_error(exc: BaseException, doing: str = "writing") -> StorageError | None:
    """The one-line :class:`StorageError` of the first ``OSError`` in ``exc``'s chain whose errno is in
    :data:`FAULTS` (None when there is none): ``"no space left on the device while writing PATH; free ..."``."""
    for cause in _chain(exc):
        if isinstance(cause, OSError) and cause.errno in FAULTS:
            code, what, fix = FAULTS[cause.errno]
            where = f" {cause.filename}" if cause.filename else ""
            return StorageError(f"{what} while {doing}{where}; {fix}.", exit_code=code)
    return None


def is_no_space(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a full disk or quota."""
    return any(isinstance(c, OSError) and c.errno in NO_SPACE for c in _chain(exc))


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def check_out_folder(path: Path, flag: str = "--out") -> None:
    """Refuse an output folder that cannot be written, before anything is loaded: a file in its place or
    above it, a parent without write permission, a read-only file system. Creates nothing."""
    path = Path(os.path.expanduser(path))
    if path.exists() and not path.is_dir():
        raise _refused(flag, path, errno.EEXIST)
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise _refused(flag, existing, errno.ENOTDIR)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _refused(flag, existing, errno.EACCES)
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise _refused(flag, existing, errno.EROFS)


def _refused(flag: str, path: Path, code: int) -> StorageError:
    _, what, fix = FAULTS[code]
    return StorageError(f"{flag} {path}: {what}; {fix}.", exit_code=2)
