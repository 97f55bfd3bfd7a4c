"""Opening a file in an output folder for appending, never through a link (issue 41, item 3).

Why: an output folder may come from someone else (``eval score``'s default ``--out`` lies inside the
outputs folder being scored), and a link planted at ``scores.jsonl`` would make an append land in a
file outside. Whole files are written by :func:`~interleave_thinker.core.paths.write_atomic`, which
renames over a link instead of writing through it; a file that grows line by line (scores, judge
replies, a reply cache, a log) is opened here instead:

- the name itself is opened with ``O_NOFOLLOW``: a symbolic link there is refused (``ELOOP``);
- a file with more than one name (a hard link planted to a file elsewhere) is refused;
- a folder on the way that is a symbolic link out of a confined output folder is refused
  (:func:`~interleave_thinker.core.paths.check_confined`).

Each refusal is an :class:`OutputLinkError` (an :class:`~interleave_thinker.core.errors.InputError`) naming
the file and the fix; a command that lets one item fail alone still stops on it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import BinaryIO, TextIO

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import check_confined

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class OutputLinkError(InputError):
    """An output file or folder is a link: the whole command stops (it is not one item's fault)."""


def _refused(path: Path, what: str) -> InputError:
    return OutputLinkError(
        f"{path} is {what}; an output file is never written through a link. Remove it (it is made anew) "
        "or choose another --out."
    )


def _checked(path: Path, flags: int) -> int:
    try:
        check_confined(path)
    except InputError as exc:
        raise OutputLinkError(str(exc)) from None
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and path.is_symlink()):
            raise _refused(path, "a symbolic link") from None
        raise
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise _refused(path, "a file with another name elsewhere (a hard link)")
    return fd


def open_append(path: Path) -> TextIO:
    """``path`` opened for appending text (UTF-8), created when missing; never through a link."""
    return os.fdopen(_checked(path, _APPEND), "a", encoding="utf-8")


def open_append_bytes(path: Path) -> BinaryIO:
    """As :func:`open_append`, for bytes."""
    return os.fdopen(_checked(path, _APPEND), "ab")
