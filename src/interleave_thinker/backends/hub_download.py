"""Fetch a hub repository before it is loaded, under one progress bar.

Why: left to themselves, transformers and diffusers download file by file, and the hub library draws a
bar per file plus a files bar and a bytes bar; a pipeline of three models fills a terminal with dozens.
Fetching the files the loader will read first (the same ones :func:`.hub.download_size` counted and
announced) leaves one bar per model, labelled with it; the loader then finds everything in the cache.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

from tqdm.auto import tqdm  # type: ignore[import-untyped]

from interleave_thinker.core.errors import ModelNotFoundError
from interleave_thinker.core.redact import redact_credentials

BYTES_BAR_PREFIX = "Reconstructing"
"""The hub library's label of its summed-bytes bar, the one bar kept (every other one is silenced)."""


class _OneBar(tqdm):
    """The hub's summed-bytes bar, relabelled and sized from the announcement; its other bars silenced."""

    label: ClassVar[str] = ""
    size: ClassVar[int] = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kept = str(kwargs.get("desc") or "").startswith(BYTES_BAR_PREFIX)
        kwargs.pop("name", None)
        if kept:
            kwargs.update(
                desc=self.label, total=self.size or None, ncols=80, file=sys.stderr, mininterval=1.0
            )
        super().__init__(*args, **{**kwargs, "disable": not kept or kwargs.get("disable", False)})
        self._kept = kept

    def __setattr__(self, name: str, value: Any) -> None:
        # the hub grows the total as each file starts; the announced size is already the whole
        if name == "total" and getattr(self, "_kept", False) and self.size:
            return
        super().__setattr__(name, value)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        """Keep the model's name as the label (the hub renames its bar "... complete" at the end)."""

    def set_description_str(self, desc: str | None = None, refresh: bool = True) -> None:
        """As :meth:`set_description`."""


def fetch(repo_id: str, skipped: tuple[str, ...], size: int, *, endpoint: str, cache: Path) -> None:
    """Download ``repo_id`` into the hub cache, less the ``skipped`` file patterns, under one bar."""
    from huggingface_hub import snapshot_download

    bar = type("RepoBar", (_OneBar,), {"label": f"downloading {repo_id}", "size": size})
    try:
        snapshot_download(
            repo_id, endpoint=endpoint, cache_dir=cache, ignore_patterns=list(skipped) or None, tqdm_class=bar
        )
    except Exception as exc:  # the hub library raises many types; each ends the same way for the user
        first = str(exc).splitlines()[0][:200] if str(exc) else "no detail"
        reason = redact_credentials(f"{type(exc).__name__}: {first}")
        raise ModelNotFoundError(
            f"Downloading {repo_id} stopped ({reason}). Run the command again to continue (finished files are "
            "kept), or run offline with --preset tiny."
        ) from exc
