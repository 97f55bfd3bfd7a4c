"""Is a Hugging Face model at hand before it is loaded: a local folder, the cache, or a hub that answers.

Why: offline, transformers and diffusers retry every file five times with growing waits (over two
minutes, each warning printed twice) before they fail; online, they start downloading many gigabytes
without saying how much. One probe with a short deadline decides first: offline, one line in seconds
that names the model and the way out; online, the size of what is about to be downloaded.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ModelNotFoundError
from interleave_thinker.core.paths import offline

PROBE_CONNECT_SECONDS = 3.0
"""Connect timeout of the probe (a name that does not resolve or a closed port fails at once)."""

PROBE_SECONDS = 5.0
"""Deadline of the whole probe, name lookup included: a hub that accepts and never answers ends here."""

OFFLINE_HINT = "run offline with --preset tiny, or download it while online and set HF_HUB_OFFLINE=1"

_WEIGHT_FALLBACKS = (".bin", ".pt", ".pth", ".msgpack", ".h5", ".ckpt", ".onnx")
"""Weight formats a loader skips when the repository has safetensors: not counted in the size."""


@dataclass(frozen=True)
class HubAnswer:
    """What the hub said of one repository (``status`` 0: no answer within the deadline)."""

    status: int
    reason: str = ""
    info: dict[str, Any] | None = None


_checked: set[str] = set()
_lock = threading.Lock()


def ensure_available(repo_id: str) -> None:
    """Return when ``repo_id`` can be loaded; else raise :class:`ModelNotFoundError` with one line.

    Cached repositories return at once (a partial cache too: the loader then names the missing file).
    A repository that will be downloaded is announced on stderr with its size, once per process, then
    fetched under one progress bar (:mod:`.hub_download`), so the loader reads it from the cache.
    """
    with _lock:
        if repo_id in _checked or _in_cache(repo_id):
            return
    if offline():
        raise ModelNotFoundError(
            f"Model {repo_id} is not in the Hugging Face cache ({_cache_root()}) and HF_HUB_OFFLINE or "
            f"INTERLEAVE_THINKER_OFFLINE is set: {OFFLINE_HINT}."
        )
    answer = probe(_endpoint(), repo_id)
    endpoint = _shown(_endpoint())
    if answer.status == 0:
        raise ModelNotFoundError(
            f"Model {repo_id} is not downloaded and the Hugging Face hub at {endpoint} cannot be reached "
            f"({answer.reason}): {OFFLINE_HINT}."
        )
    if answer.status in (401, 403) or (answer.status == 200 and _gated_without_token(answer)):
        raise ModelNotFoundError(
            f"Model {repo_id} needs a Hugging Face token with access: accept its licence at {endpoint}/{repo_id} "
            "and set HF_TOKEN (or `hf auth login`), or use --preset tiny."
        )
    if answer.status == 404:
        raise ModelNotFoundError(
            f"Model {repo_id} does not exist on the Hugging Face hub at {endpoint}: check the id, or give a "
            "local folder."
        )
    if answer.status != 200:
        raise ModelNotFoundError(
            f"Model {repo_id}: the Hugging Face hub at {endpoint} answered HTTP {answer.status}; try again "
            f"later, or {OFFLINE_HINT}."
        )
    size = download_size(answer.info or {})
    where = _cache_root()
    print(
        f"downloading {repo_id} from {endpoint}: {_gigabytes(size)} (first use only; kept in {where})",
        file=sys.stderr,
        flush=True,
    )
    from interleave_thinker.backends.hub_download import fetch

    fetch(
        repo_id, skipped_patterns(answer.info or {}), size, endpoint=_endpoint(), cache=where, token=_token()
    )
    with _lock:
        _checked.add(repo_id)


def probe(endpoint: str, repo_id: str) -> HubAnswer:
    """One request for the repository's file list, bounded by :data:`PROBE_SECONDS` in all.

    The request runs in a daemon thread because a name lookup is not bounded by the client's timeout;
    the answer is whatever arrived by the deadline.
    """
    box: list[HubAnswer] = []

    def ask() -> None:
        box.append(_ask(endpoint, repo_id))

    worker = threading.Thread(target=ask, name="hub-probe", daemon=True)
    worker.start()
    worker.join(PROBE_SECONDS)
    return box[0] if box else HubAnswer(0, f"no answer within {PROBE_SECONDS:g} s")


def _ask(endpoint: str, repo_id: str) -> HubAnswer:
    import httpx

    headers = {"user-agent": "interleave-thinker"}
    token = _token()
    if token:
        headers["authorization"] = f"Bearer {token}"
    timeout = httpx.Timeout(PROBE_SECONDS, connect=PROBE_CONNECT_SECONDS)
    try:
        reply = httpx.get(
            f"{endpoint}/api/models/{repo_id}", params={"blobs": "true"}, headers=headers, timeout=timeout
        )
    except httpx.HTTPError as exc:
        return HubAnswer(0, _reason(exc))
    if reply.status_code != 200:
        return HubAnswer(reply.status_code)
    try:
        info = reply.json()
    except ValueError:
        return HubAnswer(502, "not JSON")
    return HubAnswer(200, info=info if isinstance(info, dict) else {})


def skipped_patterns(info: dict[str, Any]) -> tuple[str, ...]:
    """File patterns a loader does not read (fallback weight formats beside safetensors): not fetched."""
    names = [str(s.get("rfilename", "")) for s in info.get("siblings") or [] if isinstance(s, dict)]
    if not any(n.endswith(".safetensors") for n in names):
        return ()
    return tuple(f"*{suffix}" for suffix in _WEIGHT_FALLBACKS)


def download_size(info: dict[str, Any]) -> int:
    """Bytes a loader fetches from a repository listing: every file, less the fallback weight formats
    when safetensors are there (loaders take those only)."""
    files = [s for s in info.get("siblings") or [] if isinstance(s, dict)]
    names = [str(s.get("rfilename", "")) for s in files]
    has_safetensors = any(n.endswith(".safetensors") for n in names)
    total = 0
    for name, entry in zip(names, files, strict=True):
        if has_safetensors and name.endswith(_WEIGHT_FALLBACKS):
            continue
        size = entry.get("size")
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            total += size
    return total


def _in_cache(repo_id: str) -> bool:
    snapshots = _cache_root() / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    try:
        return any(any(folder.iterdir()) for folder in snapshots.iterdir() if folder.is_dir())
    except OSError:
        return False


def _cache_root() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _endpoint() -> str:
    """The hub's address as set (``HF_ENDPOINT``)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def _shown(endpoint: str) -> str:
    """``endpoint`` without any user:password part, for messages."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(endpoint)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _token() -> str | None:
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:  # an unreadable token file means no token
        return None


def _gated_without_token(answer: HubAnswer) -> bool:
    gated = (answer.info or {}).get("gated")
    return bool(gated) and gated != "false" and not _token()


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _gigabytes(size: int) -> str:
    if size <= 0:
        return "size unknown"
    if size >= 1e8:
        return f"{size / 1e9:.1f} GB"
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{max(1, round(size / 1e3))} KB"


__all__ = ["HubAnswer", "download_size", "ensure_available", "probe", "skipped_patterns"]
