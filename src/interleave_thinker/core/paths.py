"""Where interleave-thinker keeps its caches (templates, tiny models)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

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
    (``benchmarks/bench_scheduler.py``). The data is fsynced before the rename."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
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
