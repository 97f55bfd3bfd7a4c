"""Run folders per session, their clean-up after a time to live, the zip download and example images."""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
import zipfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from PIL import Image, ImageDraw

from interleave_thinker.core.errors import InputError

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


def session_dir(root: Path, session_hash: str | None) -> Path:
    """One folder per browser session, so one visitor's files never sit beside another's."""
    key = _UNSAFE.sub("", session_hash or "")[:32] or f"anon{uuid.uuid4().hex[:12]}"
    return root / key


def new_run_dir(session: Path, prompt: str) -> Path:
    """A fresh, unique folder for one run (two runs in the same second never share one)."""
    slug = _UNSAFE.sub("-", prompt.lower()).strip("-")[:32] or "run"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return session / f"{stamp}-{uuid.uuid4().hex[:6]}-{slug}"


def sweep(root: Path, ttl_s: float, *, now: float | None = None) -> list[Path]:
    """Delete run folders and zips not touched for ``ttl_s`` seconds, then empty session folders."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for session in root.iterdir():
        if not session.is_dir() or session.name.startswith("_"):
            continue
        try:
            for entry in session.iterdir():
                if now - entry.stat().st_mtime > ttl_s:
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
                    removed.append(entry)
            # a later run makes it again, and so does a first write whose folder was being made in it
            # at this moment (``core/paths.FOLDER_TRIES``)
            if not any(session.iterdir()):
                session.rmdir()
                removed.append(session)
        except FileNotFoundError:
            continue  # another session's sweep got there first
    return removed


def zip_run(run_dir: Path) -> Path:
    """``<run>.zip`` beside the run folder: trace.json, images/, document.md, index.html."""
    target = run_dir.with_name(run_dir.name + ".zip")
    tmp = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(run_dir.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                archive.write(path, path.relative_to(run_dir).as_posix())
    os.replace(tmp, target)
    return target


def check_uploads(files: Sequence[str] | None, *, max_bytes: int, max_images: int) -> list[str]:
    """The uploaded paths, refused with one line when too many or too large (before opening them)."""
    paths = [str(f) for f in files or []]
    if len(paths) > max_images:
        raise InputError(f"{len(paths)} images were uploaded; this demo takes at most {max_images}.")
    for path in paths:
        size = Path(path).stat().st_size if Path(path).is_file() else 0
        if size > max_bytes:
            raise InputError(
                f"Upload {Path(path).name} is {size / 2**20:.3g} MB; the limit is "
                f"{max_bytes / 2**20:.3g} MB per image. Send a smaller image."
            )
    return paths


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
