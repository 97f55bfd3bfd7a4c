"""Reading the outputs under score: every file bounded, checked and kept inside its folder, once.

Outputs come from anyone's tool, so each read here is a boundary: a path named by the outputs (a UEval
``image_answer``) or made from an id must resolve inside its folder (no absolute path, ``..`` or
symlink leading out), a file is at most ``eval.max_image_bytes`` and an image at most
``eval.max_image_pixels`` by its header, before any pixel is decoded. A refusal is an
:class:`~interleave_thinker.core.errors.InputError` naming the file: the scorer fails that item alone.

:func:`file_digest` never raises: it is how a stored score is bound to the bytes it judged, so a changed
output is scored again and an unchanged one is not (``scores.jsonl`` ``input_sha256``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from interleave_thinker.core.config import EvalOptions
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.images import image_header, open_bounded
from interleave_thinker.core.sanitize import clean_text

MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Limits:
    """The read bounds of one scoring run (from the settings' ``eval.*``)."""

    max_bytes: int = EvalOptions().max_image_bytes
    max_pixels: int = EvalOptions().max_image_pixels

    @classmethod
    def from_options(cls, options: EvalOptions) -> Limits:
        return cls(options.max_image_bytes, options.max_image_pixels)


def inside(folder: Path, path: Path) -> Path:
    """``path`` resolved (symlinks followed); InputError when it lands outside ``folder``."""
    root = folder.resolve()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL in the name
        raise InputError(
            f"{path}: cannot be resolved ({type(exc).__name__}); give a path without a link loop."
        ) from None
    if not resolved.is_relative_to(root):
        raise InputError(
            f"{path}: leads outside {folder} (an absolute path, '..' or a symlink); outputs are read only "
            "from inside their folder: copy the file there."
        )
    return resolved


def read_file(path: Path, limits: Limits) -> bytes:
    """The bytes of a regular file of at most ``limits.max_bytes`` (read no further than that)."""
    if not path.is_file():
        raise InputError(f"{path}: not a regular file.")
    if path.stat().st_size > limits.max_bytes:  # refused unread; the read below is bounded all the same
        raise InputError(
            f"{path}: larger than {limits.max_bytes} bytes (eval.max_image_bytes); is it an image?"
        )
    with path.open("rb") as handle:
        data = handle.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise InputError(
            f"{path}: larger than {limits.max_bytes} bytes (eval.max_image_bytes); is it an image?"
        )
    return data


def read_image_bytes(folder: Path, path: Path, limits: Limits) -> bytes:
    """The encoded bytes of an image file inside ``folder``, its header checked (kind, pixels)."""
    data = read_file(inside(folder, path), limits)
    try:
        image_header(data, limits.max_pixels)
    except ValueError as exc:
        hint = " (eval.max_image_pixels)" if "pixels" in str(exc) else ""
        raise InputError(f"{path}: {exc}{hint}.") from None
    return data


def open_image(folder: Path, path: Path, limits: Limits) -> Image.Image:
    """The decoded image of a file inside ``folder``, bounded as :func:`read_image_bytes`."""
    data = read_image_bytes(folder, path, limits)
    try:
        return open_bounded(data, limits.max_pixels)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}.") from None


def file_digest(folder: Path, path: Path, limits: Limits) -> str:
    """sha256 of the file, or a word for why it has none (missing, outside, too large, unreadable)."""
    try:
        if not path.exists() and not path.is_symlink():
            return "missing"
        data = read_file(inside(folder, path), limits)
    except InputError as exc:
        return "refused:" + hashlib.sha256(str(exc).encode("utf-8", "replace")).hexdigest()[:16]
    except (OSError, ValueError):
        return "unreadable"
    return hashlib.sha256(data).hexdigest()


def reason(exc: BaseException) -> str:
    """An exception as the one-line reason stored for a failed item (cleaned, cut)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    named = text if isinstance(exc, InputError) else f"{type(exc).__name__}: {text}".rstrip(": ")
    return clean_text(named)[:MAX_REASON_CHARS]
