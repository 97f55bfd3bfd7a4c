"""The human-label sets: where each comes from, its files pinned by SHA-256, and their download.

Like the benchmarks' judge prompts, the sets are the authors' data and are never shipped:
``interleave-thinker eval calibrate download SET --to DIR`` fetches each file at the pinned commit
(``INTERLEAVE_THINKER_CALIBRATION_URL``, default raw.githubusercontent.com), checks its SHA-256 and
writes it under ``DIR`` with the layout ``eval calibrate SET --data DIR`` reads. A file that fails its
check is not written; nothing is downloaded in offline mode (``INTERLEAVE_THINKER_OFFLINE``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError, TemplateError
from interleave_thinker.core.paths import offline, write_atomic
from interleave_thinker.core.pinned_texts import GITHUB_RAW, raw_url
from interleave_thinker.eval.calibration import pins

BASE_URL_ENV = "INTERLEAVE_THINKER_CALIBRATION_URL"
DEFAULT_BASE_URL = GITHUB_RAW
MAX_FILE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class LabelSet:
    """One set: the repository and commit, the folder in it, and each file's digest (path under it)."""

    name: str
    repo: str
    commit: str
    folder: str
    files: dict[str, str]
    about: str


SETS: dict[str, LabelSet] = {
    "opening": LabelSet(
        "opening",
        "LanceZPF/OpenING",
        "56b663bc84ef64960c0253325c4a89cd10ddf7f1",
        "Interleaved_Arena",
        pins.OPENING_FILES,
        "OpenING's 4,302 human pairwise verdicts with GPT-4o's and IntJudge's on the same pairs",
    ),
    "viescore": LabelSet(
        "viescore",
        "TIGER-AI-Lab/VIEScore",
        "2cbea4e8ce5721425a8772590ecdbe7d2edd1721",
        "paper_implementation",
        pins.VIESCORE_FILES,
        "ImagenHub's human SC/PQ ratings (3 raters, 7 tasks) with GPT-4o's stored VIEScore answers",
    ),
}


def find(name: str) -> LabelSet:
    if name not in SETS:
        raise InputError(f"label set {name!r}: use one of {', '.join(SETS)}.")
    return SETS[name]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_folder(label_set: LabelSet, data: Path) -> dict[str, Any]:
    """Which of the set's pinned files ``data`` holds, and whether each matches its digest."""
    present = {rel: data / rel for rel in label_set.files if (data / rel).is_file()}
    changed = sorted(rel for rel, path in present.items() if sha256_file(path) != label_set.files[rel])
    return {
        "source": f"{label_set.repo}@{label_set.commit} {label_set.folder}/",
        "pinned_files": len(label_set.files),
        "present": len(present),
        "changed": changed,
        "pinned": len(present) == len(label_set.files) and not changed,
    }


def _fetch(url: str, timeout: float) -> bytes:
    import httpx

    try:
        with httpx.stream("GET", url, timeout=timeout, follow_redirects=True) as response:
            response.raise_for_status()
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise TemplateError(f"{url} is larger than {MAX_FILE_BYTES} bytes; refusing it.")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise TemplateError(f"Could not download {url}: {exc}") from exc
    return b"".join(chunks)


def download(
    label_set: LabelSet,
    to: Path,
    *,
    base_url: str | None = None,
    timeout: float = 60.0,
    on_file: Callable[[str], None] | None = None,
) -> list[str]:
    """Each file of the set fetched at its commit, checked and written under ``to`` (kept when already
    there with the right digest); the relative paths written."""
    if offline():
        raise TemplateError(
            f"offline mode is on: the {label_set.name} labels cannot be downloaded; copy a folder fetched "
            f"elsewhere and pass it as --data."
        )
    base = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
    written = []
    for rel, digest in label_set.files.items():
        target = to / rel
        if target.is_file() and sha256_file(target) == digest:
            continue
        url = raw_url(base, label_set.repo, label_set.commit, f"{label_set.folder}/{rel}")
        data = _fetch(url, timeout)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise TemplateError(
                f"{url} fails its SHA-256 check (expected {digest}, got {actual}); nothing written for it."
            )
        write_atomic(target, data)
        written.append(rel)
        if on_file is not None:
            on_file(rel)
    return written
