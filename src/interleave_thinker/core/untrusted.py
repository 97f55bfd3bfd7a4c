"""Reading files that someone else wrote or named: paths kept inside their folder, sizes bounded.

Why one module: a run folder, a batch folder or a record file is data, and the names inside it
(``image_file``, ``input_images``, an image path of a record) are data too. A trace naming
``/home/me/.ssh/id_rsa`` or ``../../secret.png``, an image that is a symbolic link out of its folder, a
text file named ``.png``, a decompression bomb or a trace nested a million levels deep must each fail
alone, with one line naming the file and the limit, instead of being copied into a corpus or stopping
the command. Every check raises :class:`UnsafeFile` (an :class:`InputError`) whose ``kind`` says which
rule was broken, so a reader can count the reasons.

Limits (``docs/configuration.md``, "Limits of files read as data"):

- an image: at most :data:`MAX_IMAGE_BYTES` bytes and :data:`MAX_IMAGE_PIXELS` pixels (read from its
  header, before any pixel is decoded), and a format Pillow identifies;
- a JSON file: at most :data:`MAX_JSON_BYTES` bytes and :data:`MAX_JSON_DEPTH` levels of nesting.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

import pydantic_core
from PIL import Image, UnidentifiedImageError

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.images import MAX_IMAGE_PIXELS, ImageRefused, image_header

MAX_IMAGE_BYTES = 64 * 2**20
"""Largest image file read from data (bytes)."""
MAX_JSON_BYTES = 256 * 2**20
"""Largest JSON file (a trace, a record) read from data (bytes)."""
MAX_JSON_DEPTH = 200
"""Deepest nesting of a JSON file read from data: the limit of pydantic-core's parser, which we use."""

Kind = Literal["unsafe_path", "missing", "too_large", "not_an_image", "too_deep"]


class UnsafeFile(InputError):
    """A file named by data that may not be read: ``kind`` is the rule it broke."""

    def __init__(self, message: str, kind: Kind) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ImageLimits:
    """The bounds of an image read from data (``--max-image-pixels`` sets the pixels)."""

    max_pixels: int = MAX_IMAGE_PIXELS
    max_bytes: int = MAX_IMAGE_BYTES


def is_within(path: Path, root: Path) -> bool:
    """True when ``path`` (symbolic links resolved) is ``root`` (resolved) or below it."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def inside(folder: Path, name: str, *, what: str, root: Path | None = None) -> Path:
    """``folder / name`` when ``name`` is a relative path without ``..`` that stays inside ``root``
    (default: ``folder``) with every symbolic link followed; else :class:`UnsafeFile` (kind
    ``unsafe_path``) naming ``what``."""
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if not name or "\x00" in name or posix.is_absolute() or windows.is_absolute() or windows.drive:
        raise UnsafeFile(
            f"{what}: {name!r} is not a relative path inside {folder}; data may only name files in its folder.",
            "unsafe_path",
        )
    if ".." in posix.parts or ".." in windows.parts:
        raise UnsafeFile(
            f"{what}: {name!r} leaves {folder} through '..'; data may only name files in its folder.",
            "unsafe_path",
        )
    path, root = folder / name, root or folder
    if not is_within(path, root):
        raise UnsafeFile(
            f"{what}: {path} is a symbolic link (or inside one) leading out of {root} to "
            f"{os.path.realpath(path)}; data may only name files in its folder.",
            "unsafe_path",
        )
    return path


def _size(path: Path, limit: int, what: str) -> int:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise UnsafeFile(f"{what}: {path} does not exist.", "missing") from None
    except OSError as exc:
        raise UnsafeFile(f"{what}: {path} cannot be read ({exc.strerror or exc}).", "missing") from None
    if not path.is_file():
        raise UnsafeFile(f"{what}: {path} is not a file.", "missing")
    if size > limit:
        raise UnsafeFile(f"{what}: {path} has {size} bytes, over the limit of {limit}.", "too_large")
    return size


def read_bounded(path: Path, limit: int, *, what: str) -> bytes:
    """The bytes of ``path``; :class:`UnsafeFile` when it is missing or over ``limit`` bytes (checked
    before and while reading, so a file that grows meanwhile is still bounded)."""
    _size(path, limit, what)
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{what}: {path} has more than {limit} bytes, over the limit.", "too_large")
    return data


def load_json(data: bytes | str) -> Any:
    """Decode JSON nested at most :data:`MAX_JSON_DEPTH` levels (ValueError beyond, never RecursionError).

    pydantic-core's parser stops at that depth at native speed; a document it refuses for another
    reason (a lone surrogate escape, which Python's reader accepts) is read by :func:`json.loads`.
    """
    try:
        return pydantic_core.from_json(data)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None


def rows_by_id(path: Path) -> dict[str, dict[str, Any]]:
    """The JSON-object lines of a JSONL file that carry an ``id``, keyed by it as text (a later line of
    an id replaces an earlier one); empty when the file is absent.

    Why one reader: the files it reads (a batch's journal, a scoring run's scores) are appended a line at
    a time, so a killed run can leave a torn last line; such a line, or any that is not a JSON object
    (nested at most :data:`MAX_JSON_DEPTH` levels), is skipped.
    """
    rows: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = load_json(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("id") is not None:
            rows[str(row["id"])] = row
    return rows


def check_image(
    path: Path, limits: ImageLimits = ImageLimits(), *, what: str = "image", verify: bool = True
) -> tuple[int, int]:
    """Width and height of the image file ``path``, from its header (:func:`core.images.image_header`);
    :class:`UnsafeFile` when it is missing, over the byte or pixel limit, or not an image Pillow can
    identify (and, with ``verify``, whose structure Pillow cannot verify: this reads the whole file,
    still without decoding pixels)."""
    _size(path, limits.max_bytes, what)
    try:
        _, width, height = image_header(path, limits.max_pixels)
    except ImageRefused as exc:
        if exc.kind == "too_large":
            raise UnsafeFile(f"{what}: {path} {exc} (--max-image-pixels).", "too_large") from None
        raise UnsafeFile(f"{what}: {path} is not an image Pillow can read ({exc}).", "not_an_image") from None
    if verify:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(path) as image:
                    image.verify()  # the file's structure (chunks, checksums), without decoding pixels
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise UnsafeFile(
                f"{what}: {path} is not an image Pillow can read ({reason}).", "not_an_image"
            ) from None
    return width, height


def open_image(path: Path, limits: ImageLimits = ImageLimits(), *, what: str = "image") -> Image.Image:
    """The image file ``path`` as RGB, checked by :func:`check_image` before a pixel is decoded."""
    check_image(path, limits, what=what)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise UnsafeFile(f"{what}: {path} cannot be decoded ({exc}).", "not_an_image") from None
