"""Texts we may not ship, obtained at run time like model weights, and checked by SHA-256.

The released planner/critic/judge templates (:mod:`interleave_thinker.core.prompt_store`) and the
benchmarks' judge prompts (:mod:`interleave_thinker.eval.prompts`) are other people's words, pinned to
one commit of their repositories. Both are found the same way, so the way lives here once: a folder
the user names, a cache under ``~/.cache/interleave-thinker``, or a download of the source file at the
pinned commit, read with ``ast`` (never executed); every text's digest is checked before it is used
or cached.
"""

from __future__ import annotations

import ast
import hashlib
import os
from pathlib import Path
from typing import ClassVar, TypedDict

from interleave_thinker.core.errors import TemplateError
from interleave_thinker.core.paths import cache_home, offline, write_atomic

GITHUB_RAW = "https://raw.githubusercontent.com"
"""Where GitHub serves a repository's files as they are; each pinned source's default base URL."""


def raw_url(base_url: str, repo: str, commit: str, path: str) -> str:
    """``path`` of ``repo`` (owner/name) at ``commit``, under a raw host laid out as GitHub's."""
    return f"{base_url.rstrip('/')}/{repo}/{commit}/{path}"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fetch_text(url: str, timeout: float = 20.0) -> str:
    """GET one source file (UTF-8); any transport or HTTP failure is a :class:`TemplateError`."""
    import httpx

    try:
        response = httpx.get(url, timeout=timeout, follow_redirects=True)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise TemplateError(f"Could not download {url}: {exc}") from exc
    try:
        return response.content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateError(f"{url} is not UTF-8 text ({exc}); is the URL a source file?") from exc


def extract_literals(source: str, names: set[str], *, origin: str) -> dict[str, str]:
    """Read top-level string assignments from Python source without executing it."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TemplateError(f"{origin} is not valid Python ({exc}); cannot read templates from it.") from exc
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in names:
                if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
                    raise TemplateError(f"{origin}: {target.id} is not a plain string literal.")
                found[target.id] = value.value
    missing = names - set(found)
    if missing:
        raise TemplateError(f"{origin} does not define {', '.join(sorted(missing))}.")
    return found


def read_text(path: Path) -> tuple[str, str]:
    """A text file as UTF-8 (bytes decoded, so no newline translation) and its SHA-256."""
    text = path.read_bytes().decode("utf-8")
    return text, sha256_text(text)


def check_download(text: str, expected: str, what: str) -> str:
    """``text`` when its digest is ``expected``; else a :class:`TemplateError` naming ``what`` and both digests."""
    actual = sha256_text(text)
    if actual != expected:
        raise TemplateError(
            f"{what} fails its SHA-256 check (expected {expected}, got {actual}); refusing to use it."
        )
    return text


def write_cache(files: dict[Path, str]) -> None:
    """Write verified texts into the cache, each atomically (a reader never sees half a file)."""
    for path, text in files.items():
        write_atomic(path, text.encode("utf-8"))


class StoreOptions(TypedDict, total=False):
    """Where a store looks: the keyword arguments of :class:`PinnedStore` (for subclasses that add theirs)."""

    folder: Path | None
    cache_dir: Path | None
    base_url: str | None
    download: bool
    timeout: float | None


class PinnedStore:
    """Where pinned texts are looked for: a folder (argument or ``FOLDER_ENV``), the cache
    (``cache_home() / CACHE_NAME``), a base URL (argument, ``BASE_URL_ENV`` or ``DEFAULT_BASE_URL``)
    and whether downloads are allowed (never in offline mode)."""

    FOLDER_ENV: ClassVar[str]
    BASE_URL_ENV: ClassVar[str]
    DEFAULT_BASE_URL: ClassVar[str]
    CACHE_NAME: ClassVar[str]
    DEFAULT_TIMEOUT: ClassVar[float] = 30.0

    def __init__(
        self,
        *,
        folder: Path | None = None,
        cache_dir: Path | None = None,
        base_url: str | None = None,
        download: bool = True,
        timeout: float | None = None,
    ) -> None:
        env_folder = os.environ.get(self.FOLDER_ENV)
        self.folder = folder if folder is not None else (Path(env_folder) if env_folder else None)
        self.cache_dir = cache_dir if cache_dir is not None else cache_home() / self.CACHE_NAME
        self.base_url = (base_url or os.environ.get(self.BASE_URL_ENV) or self.DEFAULT_BASE_URL).rstrip("/")
        self.download_allowed = download and not offline()
        self.timeout = timeout if timeout is not None else self.DEFAULT_TIMEOUT
