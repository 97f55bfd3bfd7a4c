"""Run folders per session, their clean-up after a time to live, the zip download and example images."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
import zipfile
from datetime import datetime
from pathlib import Path

from PIL import Image, ImageDraw

from interleave_thinker.core.errors import ConfigError

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


def own_gradio_cache() -> Path:
    """Give this process a Gradio cache of its own (``GRADIO_TEMP_DIR``) unless the user chose one.

    Gradio names a cached file by its content and, when a server stops, deletes every file it cached: two
    demos on one machine sharing ``/tmp/gradio`` that produce the same image (same request, same seed)
    would delete each other's results. The folder is removed when the process exits."""
    chosen = os.environ.get("GRADIO_TEMP_DIR")
    if chosen:
        return Path(chosen)
    folder = tempfile.mkdtemp(prefix="interleave-thinker-gradio-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["GRADIO_TEMP_DIR"] = folder
    return Path(folder)


def session_dir(root: Path, session_hash: str | None) -> Path:
    """One folder per browser session, so one visitor's files never sit beside another's."""
    key = _UNSAFE.sub("", session_hash or "")[:32] or f"anon{uuid.uuid4().hex[:12]}"
    return root / key


def new_run_dir(session: Path, prompt: str) -> Path:
    """A fresh, unique folder for one run (two runs in the same second never share one)."""
    slug = _UNSAFE.sub("-", prompt.lower()).strip("-")[:32] or "run"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return session / f"{stamp}-{uuid.uuid4().hex[:6]}-{slug}"


def private_root(root: Path, *, default: bool = False) -> Path:
    """Make the folder of every session's runs (mode 0700), and refuse one another account owns:
    visitors' uploads and results are nobody else's to read, and nobody else's to plant links in.
    The default root (:func:`~interleave_thinker.ui.options.default_out_root`) is made private again
    each time; a root given with ``--out-root`` keeps the mode its owner gave it."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = root.stat()
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise ConfigError(
            f"Demo output folder {root} belongs to another user (uid {info.st_uid}); "
            "give a folder of your own with --out-root."
        )
    if default and info.st_mode & 0o077:
        root.chmod(0o700)
    return root


def sweep(root: Path, ttl_s: float, *, now: float | None = None) -> list[Path]:
    """Delete run folders and zips not touched for ``ttl_s`` seconds, then empty session folders.

    Links are never followed nor deleted: the demo makes none, so a link in the root or in a session
    folder is someone else's (a session folder linked elsewhere would have its target's files deleted,
    and ``rmtree`` refuses a link, which stopped every run). One entry that cannot be removed is
    logged and left; the sweep goes on."""
    now = time.time() if now is None else now
    try:
        sessions = [e for e in os.scandir(root) if not e.name.startswith("_")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed: list[Path] = []
    for session in sessions:
        if session.is_dir(follow_symlinks=False):
            removed += _sweep_session(Path(session.path), ttl_s, now)
    return removed


def keep_fresh(folder: Path, ttl_s: float) -> None:
    """Mark a run folder in use (a redo reads it): touched, so no session's sweep removes it for another
    ``ttl_s``. One already past its time is left to the sweep, as if the redo had come later."""
    with contextlib.suppress(OSError):  # gone already: the caller refuses a missing run
        if time.time() - folder.stat().st_mtime <= ttl_s:
            os.utime(folder)


def _sweep_session(session: Path, ttl_s: float, now: float) -> list[Path]:
    removed: list[Path] = []
    try:
        entries = list(os.scandir(session))
    except FileNotFoundError:
        return removed  # another session's sweep got there first
    for entry in entries:
        try:
            if entry.is_symlink() or now - entry.stat(follow_symlinks=False).st_mtime <= ttl_s:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # removes links inside a run folder, never their targets
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except FileNotFoundError:
            continue
        except OSError as exc:  # e.g. swapped for a link meanwhile: rmtree refuses it
            logger.warning("demo clean-up left %s in place: %s", entry.path, exc)
    # a later run makes it again, and so does a first write whose folder was being made in it at this
    # moment (``core/paths.FOLDER_TRIES``)
    try:
        if not any(session.iterdir()):
            session.rmdir()
            removed.append(session)
    except OSError:
        pass  # not empty after all, or gone: either way nothing to do
    return removed


def zip_run(run_dir: Path) -> Path:
    """``<run>.zip`` beside the run folder: trace.json, images/, document.md, index.html."""
    target = run_dir.with_name(run_dir.name + ".zip")
    tmp = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(run_dir.rglob("*")):
            if path.is_file() and not path.is_symlink() and not path.name.startswith("."):
                archive.write(path, path.relative_to(run_dir).as_posix())
    os.replace(tmp, target)
    return target


def example_images(root: Path) -> list[Path]:
    """Two small drawn frames (a ball rolling towards a box) for the examples that take images."""
    folder = root / "_examples"  # "_": never swept
    paths = [folder / "frame1.png", folder / "frame2.png"]
    if all(p.is_file() for p in paths):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    for path, x in zip(paths, (40, 120), strict=True):
        image = Image.new("RGB", (256, 256), (235, 245, 255))
        draw = ImageDraw.Draw(image)
        draw.rectangle((0, 200, 256, 256), fill=(120, 180, 90))
        draw.rectangle((190, 140, 240, 200), fill=(150, 100, 60))
        draw.ellipse((x, 160, x + 40, 200), fill=(220, 40, 40))
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
        image.save(tmp, format="PNG")
        os.replace(tmp, path)
    return paths
