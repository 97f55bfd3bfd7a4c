"""Reading one training record: each problem becomes an :class:`Issue` naming the file, line and field.

Why a class of its own: every loader in :mod:`.loaders` reads its records through these checks
(aliases, strings, booleans, 0-10 scores, image paths kept inside ``image_dir`` and naming real images
within the limits), so a problem is
reported the same way whatever the format, and all of a file's problems are collected at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interleave_thinker.core.untrusted import ImageLimits, UnsafeFile, check_image
from interleave_thinker.train.data.issues import Issue, LineIndex, PathPart, field_name, locate


class RecordReader:
    """Reads one record (a JSON object) and turns each problem into an :class:`Issue` with its line."""

    def __init__(
        self,
        label: str,
        text: str,
        start: int,
        first_line: int,
        image_dir: Path,
        lines: LineIndex | None = None,
    ) -> None:
        """``lines``: the index of ``text``, shared by every record of one file (made when first needed)."""
        self.label, self.text, self.start, self.first_line = label, text, start, first_line
        self._lines = lines
        self.image_dir = image_dir
        self.limits = ImageLimits()
        self.issues: list[Issue] = []

    def issue(self, parts: Sequence[PathPart], problem: str) -> None:
        offset = locate(self.text, self.start, parts)
        if self._lines is None:
            self._lines = LineIndex(self.text)
        line = self.first_line + self._lines.line(offset) - 1
        self.issues.append(Issue(self.label, line, field_name(parts), problem))

    def get(
        self, obj: dict[str, Any], parts: tuple[PathPart, ...], *names: str
    ) -> tuple[Any, tuple[PathPart, ...]]:
        """The first present key among ``names`` (aliases) and its path; ``None`` and an issue when absent."""
        for name in names:
            if name in obj and obj[name] is not None:
                return obj[name], (*parts, name)
        self.issue(
            (*parts, names[0]), "missing" + (f" (also accepted: {', '.join(names[1:])})" if names[1:] else "")
        )
        return None, (*parts, names[0])

    def string(
        self, obj: dict[str, Any], parts: tuple[PathPart, ...], *names: str, empty: bool = True
    ) -> str | None:
        value, where = self.get(obj, parts, *names)
        if value is None:
            return None
        if not isinstance(value, str):
            self.issue(where, f"must be a string, got {type(value).__name__}")
            return None
        if not empty and not value.strip():
            self.issue(where, "must not be empty")
            return None
        return value

    def boolean(self, value: Any, where: tuple[PathPart, ...]) -> bool | None:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        self.issue(where, f"must be true or false, got {value!r}")
        return None

    def score(self, value: Any, where: tuple[PathPart, ...]) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.issue(where, f"must be a number from 0 to 10, got {value!r}")
            return None
        if not 0 <= value <= 10:
            self.issue(where, f"must be from 0 to 10, got {value}")
            return None
        return float(value)

    def image(self, value: Any, where: tuple[PathPart, ...]) -> Path | None:
        """Resolve an image path inside ``image_dir``; refuse escapes, missing files and files that are not
        images within :attr:`limits` (bytes, pixels; read from the header only)."""
        if not isinstance(value, str) or not value.strip():
            self.issue(where, f"must be an image path, got {value!r}")
            return None
        root = self.image_dir.resolve()
        path = (root / value).resolve()
        if not path.is_relative_to(root):
            self.issue(
                where,
                f"path {value!r} escapes the image folder {root}; keep images inside it or pass --image-dir",
            )
            return None
        if not path.is_file():
            self.issue(where, f"image file not found: {path}")
            return None
        try:
            check_image(path, self.limits, what="image", verify=False)  # the header: a training set is large
        except UnsafeFile as exc:  # a text file named .png, a bomb, a file over the limits
            self.issue(where, str(exc).removeprefix("image: "))
            return None
        return path

    def images(self, obj: dict[str, Any], parts: tuple[PathPart, ...]) -> list[Path] | None:
        """``images`` (a list or one string) or ``image``; absent means no images."""
        key = "images" if "images" in obj else "image"
        value = obj.get(key)
        if value is None:
            return []
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list):
            self.issue((*parts, key), f"must be a list of image paths, got {type(value).__name__}")
            return None
        found = [
            self.image(item, (*parts, key, i) if key == "images" else (*parts, key))
            for i, item in enumerate(values)
        ]
        return None if any(p is None for p in found) else [p for p in found if p is not None]
