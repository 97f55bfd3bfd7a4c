"""The input images of one call: file paths or PIL images, one of them or a list, opened up front.

Why both: the CLI has files, a Python caller (a diffusers user) has ``PIL.Image`` objects in hand. The
trace's ``request.images`` names each input: its path, or for an image given in memory a label with
its size and a digest of its pixels (so a resumed call with the same image is the same request); the
pixels themselves are copied into the run folder as ``images/input_N.png`` either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from interleave_thinker.core.errors import InputError

InputImage = str | Path | Image.Image
InputImages = InputImage | Sequence[InputImage]


def open_image_file(path: str | Path) -> Image.Image:
    """One input image file as RGB; a missing or unreadable file is an :class:`InputError` naming it."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"Input image {p} does not exist.")
    try:
        with Image.open(p) as handle:
            return handle.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(f"Input image {p} cannot be read as an image ({exc}).") from None


def memory_label(position: int, image: Image.Image) -> str:
    """How ``request.images`` names an image given in memory: position, size and pixel digest."""
    digest = hashlib.sha256(f"{image.mode}{image.size}".encode() + image.tobytes()).hexdigest()
    return f"<PIL.Image {position}: {image.width}x{image.height}, sha256 {digest[:16]}>"


def read_input_images(images: InputImages | None) -> tuple[list[str], list[Image.Image]]:
    """The names ``request.images`` records and the images as RGB copies, in order."""
    items: Sequence[object] = [images] if isinstance(images, str | Path | Image.Image) else list(images or [])
    names: list[str] = []
    opened: list[Image.Image] = []
    for position, item in enumerate(items, start=1):
        if isinstance(item, Image.Image):
            image = item.convert("RGB")  # a copy: the caller may change theirs while the run goes on
            names.append(memory_label(position, image))
        elif isinstance(item, str | Path):
            image = open_image_file(item)
            names.append(str(item))
        else:
            raise InputError(
                f"Input image {position} is a {type(item).__name__}; give a file path or a PIL.Image."
            )
        opened.append(image)
    return names, opened
