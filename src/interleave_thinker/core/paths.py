"""Where interleave-thinker keeps its caches (templates, tiny models)."""

from __future__ import annotations

import itertools
import os
import stat
import threading
from pathlib import Path

from interleave_thinker.core.errors import InputError

HOME_ENV = "INTERLEAVE_THINKER_HOME"


def cache_home() -> Path:
    """``$INTERLEAVE_THINKER_HOME`` or ``~/.cache/interleave-thinker``."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "interleave-thinker"


def offline() -> bool:
    """True when the user asked for no network (ours, or the Hugging Face hub's switch)."""
    for name in ("INTERLEAVE_THINKER_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return True
    return False


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write through a temporary file in the same folder and rename, so readers never see half a file.

    The temporary file is created by ``os.open`` with mode 0666, so the kernel applies the umask as
    ``open()`` would (no umask lookup, no chmod), and the folder is made only when it is missing: a
    batch writes a few files per backend call, and every saved system call shows in its CPU per call
    (``benchmarks/bench_scheduler.py``). The data is fsynced before the rename.

    Below a folder given to :func:`confine`, a folder on the way that is a symbolic link out of it is
    refused (:class:`InputError`); the file itself is never followed: the temporary file is created
    with ``O_EXCL`` and the rename replaces a link at ``path`` instead of writing through it."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    check_confined(path)
    fd, tmp = _create_partial(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_partial_names = itertools.count()
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


FOLDER_TRIES = 3
"""Times a missing folder is made for one write: more than once because a clean-up may remove an empty
parent while the folder is being made (the demo's sweep removes empty session folders while another
session's first run makes its folder inside one)."""


def _create_partial(path: Path) -> tuple[int, str]:
    """A new ``.NAME.PID.N.tmp`` beside ``path`` (the pattern ``run_folder.PARTIAL_WRITE`` cleans up)."""
    folder_made = 0
    while True:
        tmp = os.path.join(path.parent, f".{path.name}.{os.getpid()}.{next(_partial_names)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:  # left by an earlier process of the same pid: take the next number
            continue
        except FileNotFoundError:
            if folder_made >= FOLDER_TRIES:
                raise
            folder_made += 1
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except FileNotFoundError:  # a parent was removed between its making and the folder's
                continue


# --- output folders: no write through a symbolic link out of them --------------------------------------------

_confined: dict[str, str] = {}
"""An output folder (as given, absolute, and resolved) -> its resolved path."""
_confined_lock = threading.Lock()


def confine(root: Path) -> None:
    """From now on, in this process, :func:`write_atomic` refuses to write below ``root`` through a
    folder that is a symbolic link leading out of it (a link planted in ``--out`` would otherwise
    make a batch write a request's files elsewhere). ``root`` itself may be a link: the user chose it."""
    given = os.path.abspath(root)
    real = os.path.realpath(root)
    with _confined_lock:
        _confined[given] = real
        _confined[real] = real


def _confining_root(folder: str) -> tuple[str, str] | None:
    """The nearest confined folder at or above ``folder`` (absolute), and its resolved path."""
    probe = folder
    while True:
        real = _confined.get(probe)
        if real is not None:
            return probe, real
        up = os.path.dirname(probe)
        if up == probe:
            return None
        probe = up


def check_confined(path: Path) -> None:
    """:class:`InputError` when a folder between a confined root and the file ``path`` is a symbolic
    link out of the root (see :func:`check_folder`)."""
    check_folder(path.parent)


def check_folder(path: Path) -> None:
    """:class:`InputError` when ``path`` or a folder between it and the confined root above it is a
    symbolic link out of that root. One ``lstat`` per existing folder below the root (a batch file: two
    or three); folders not made yet will be made as real folders."""
    if not _confined:
        return
    folder = os.path.abspath(path)
    found = _confining_root(folder)
    if found is None:
        return
    root, real_root = found
    current = root
    for part in folder[len(root) :].split(os.sep):
        if not part:
            continue
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            target = os.path.realpath(current)
            if target != real_root and not target.startswith(real_root.rstrip(os.sep) + os.sep):
                raise InputError(
                    f"{current} is a symbolic link to {target}, outside the output folder {root}; "
                    "nothing is written through it: remove the link or choose another --out."
                )
