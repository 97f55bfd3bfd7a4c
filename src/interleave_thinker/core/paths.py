"""Where interleave-thinker keeps its caches (templates, tiny models)."""

from __future__ import annotations

import os
import tempfile
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


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` can only be read by setting it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write through a temporary file in the same folder and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; outputs follow the umask like open()
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
