"""Fetch a hub repository before it is loaded, under one progress bar, trusting nothing the hub says.

Why our own fetch: left to themselves, transformers and diffusers download file by file under dozens of
bars; and the hub library builds cache paths from the values the hub sends (file names, the commit,
each file's ETag) without checking them, so a hostile ``HF_ENDPOINT`` could write where it chose, and
it stores whatever arrives, however far past the announced size (issue 41, item 2). Here every value
the hub gives is checked against the cache layout's own rules before anything is written:

- the commit is 40 hexadecimal digits, and each file's ``X-Repo-Commit`` (when sent) is that commit;
- a file name is a relative path of plain parts (no ``..``, ``.``, empty part, backslash, control
  character or leading ``/``) that stays inside the snapshot folder;
- an ETag (the blob's name) is letters, digits, ``-`` and ``_`` only, at most 128 of them;
- a file's bytes go to a temporary file inside the cache's ``blobs`` folder, which is renamed into
  place only when exactly the announced size arrived; more is cut at the announced size and refused.

The layout is the hub library's (``models--ORG--NAME/{blobs,snapshots/COMMIT,refs/main}``), so the
loaders then find everything in the cache, as before.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from interleave_thinker.core.errors import ModelNotFoundError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.redact import redact_credentials

CONNECT_SECONDS = 10.0
READ_SECONDS = 60.0
"""Per read: a hub that stops sending mid-file ends the download here."""

_COMMIT = re.compile(r"[0-9a-f]{40}")
_ETAG = re.compile(r"[0-9A-Za-z_-]{1,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_NAME_CHARS = 1_000


class HubRefused(ValueError):
    """A value from the hub that the cache layout does not allow; nothing was written for it."""


def check_commit(value: Any) -> str:
    if not isinstance(value, str) or not _COMMIT.fullmatch(value):
        raise HubRefused(f"the hub named the commit {str(value)[:60]!r}, not 40 hexadecimal digits")
    return value


def check_etag(value: str | None, name: str) -> str:
    etag = (value or "").removeprefix("W/").strip('"')
    if not _ETAG.fullmatch(etag):
        raise HubRefused(f"the hub gave {name} the ETag {(value or '')[:60]!r}, not a plain blob name")
    return etag


def check_name(value: Any, root: Path) -> str:
    """``value`` when it is a file name inside ``root`` by the rules above; :class:`HubRefused` otherwise."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise HubRefused(f"the hub listed the file name {str(value)[:60]!r}")
    parts = PurePosixPath(value).parts
    unsafe = (
        value.startswith("/")
        or "\\" in value
        or _CONTROL.search(value)
        or any(part in ("", ".", "..") for part in value.split("/"))
    )
    target = os.path.normpath(os.path.join(root, *parts))
    if unsafe or os.path.commonpath([target, os.path.normpath(root)]) != os.path.normpath(root):
        raise HubRefused(f"the hub listed the file name {value[:60]!r}, which leaves the snapshot folder")
    return value


def check_size(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise HubRefused(f"the hub announced no size for {name[:60]!r} (got {str(value)[:30]!r})")
    return value


def fetch(
    repo_id: str, skipped: tuple[str, ...], size: int, *, endpoint: str, cache: Path, token: str | None = None
) -> None:
    """Download ``repo_id`` into the hub cache, less the ``skipped`` file patterns, under one bar (``token``:
    the user's hub token, sent to ``endpoint`` only)."""
    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    bar = tqdm(
        total=size or None,
        desc=f"downloading {repo_id}",
        unit="B",
        unit_scale=True,
        ncols=80,
        file=sys.stderr,
        mininterval=1.0,
    )
    try:
        with _client(token) as client:
            _fetch(client, repo_id, skipped, endpoint, cache, bar.update)
    except Exception as exc:  # the transport raises many types; each ends the same way for the user
        first = str(exc).splitlines()[0][:200] if str(exc) else "no detail"
        reason = redact_credentials(f"{type(exc).__name__}: {first}")
        raise ModelNotFoundError(
            f"Downloading {repo_id} stopped ({reason}). Run the command again to continue (finished files are "
            "kept), or run offline with --preset tiny."
        ) from exc
    finally:
        bar.close()


def _client(token: str | None) -> Any:
    import httpx

    headers = {"user-agent": "interleave-thinker"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    timeout = httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS)
    return httpx.Client(headers=headers, timeout=timeout)  # redirects: followed by hand, without the token


def _fetch(
    client: Any, repo_id: str, skipped: tuple[str, ...], endpoint: str, cache: Path, progress: Any
) -> None:
    repo_dir = cache / f"models--{repo_id.replace('/', '--')}"
    listing = client.get(f"{endpoint}/api/models/{repo_id}/revision/main", params={"blobs": "true"})
    listing.raise_for_status()
    info = listing.json()
    commit = check_commit(info.get("sha") if isinstance(info, dict) else None)
    snapshot = repo_dir / "snapshots" / commit
    files = []
    for entry in info.get("siblings") or []:
        name = check_name(entry.get("rfilename") if isinstance(entry, dict) else None, snapshot)
        if not any(fnmatch(name, pattern) for pattern in skipped):
            files.append((name, check_size(entry.get("size"), name)))
    for name, announced in files:
        target = snapshot.joinpath(*PurePosixPath(name).parts)
        if target.exists():
            continue
        url = f"{endpoint}/{repo_id}/resolve/{commit}/{quote(name)}"
        with client.stream("GET", url) as reply:
            # the hub's own answer names the commit and the blob; a redirect (to a CDN) only carries bytes
            if not reply.is_redirect:
                reply.raise_for_status()
            sent_commit = reply.headers.get("x-repo-commit")
            if sent_commit is not None and sent_commit != commit:
                raise HubRefused(
                    f"the hub sent {name[:60]!r} from the commit {sent_commit[:60]!r}, not {commit}"
                )
            etag = check_etag(reply.headers.get("x-linked-etag") or reply.headers.get("etag"), name)
            blob = repo_dir / "blobs" / etag
            if not blob.exists() and not reply.is_redirect:
                _store(reply.iter_bytes(), blob, announced, name, progress)
            elif not blob.exists():
                _store_from(reply.next_request.url, blob, announced, name, progress)
        _link(blob, target)
    refs = repo_dir / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    write_atomic(refs / "main", commit)  # renamed over whatever is there, never written through a link


def _store_from(url: Any, blob: Path, announced: int, name: str, progress: Any) -> None:
    """The bytes behind a redirect, fetched without the hub's credentials (another host)."""
    import httpx

    timeout = httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS)
    with httpx.stream("GET", url, timeout=timeout, follow_redirects=True) as reply:
        reply.raise_for_status()
        _store(reply.iter_bytes(), blob, announced, name, progress)


def _store(chunks: Any, blob: Path, announced: int, name: str, progress: Any) -> None:
    """Stream into a temporary file beside ``blob``, cut at ``announced`` bytes; renamed when exactly that arrived."""
    blob.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=blob.parent, prefix=".", suffix=".incomplete")
    try:
        written = 0
        with os.fdopen(handle, "wb") as out:
            for chunk in chunks:
                if written + len(chunk) > announced:
                    raise HubRefused(
                        f"the hub sent more than the {announced} bytes it announced for {name[:60]!r}"
                    )
                out.write(chunk)
                written += len(chunk)
                progress(len(chunk))
        if written != announced:
            raise HubRefused(
                f"the hub sent {written} of the {announced} bytes it announced for {name[:60]!r}"
            )
        os.replace(temporary, blob)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _link(blob: Path, target: Path) -> None:
    """The snapshot's entry for a file: a relative link to its blob, as the hub library lays it out."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(os.path.relpath(blob, target.parent), target)
    except OSError:  # a file system without links: a copy
        shutil.copyfile(blob, target)
