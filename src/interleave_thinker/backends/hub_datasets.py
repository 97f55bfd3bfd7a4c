"""Hugging Face datasets, loaded in one place, so that offline means offline whichever switch was set.

Why: ``datasets`` and ``huggingface_hub`` read ``HF_HUB_OFFLINE`` once, when imported. A process that
set it later, or set only ``INTERLEAVE_THINKER_OFFLINE``, had them try the network first: about 20 s of
connection attempts on a machine without one, before the "not in the cache" error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from interleave_thinker.core.paths import offline


@contextlib.contextmanager
def _offline_while(active: bool) -> Iterator[None]:
    """Both libraries' offline switches on for the block (restored after), when ``active``."""
    import datasets.config
    from huggingface_hub import constants

    saved = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    if active:
        datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def load_hf_dataset(name: str, split: str | None) -> Any:
    """``datasets.load_dataset(name, split=...)`` (every split when ``split`` is empty), from the cache
    alone when the user asked for no network. Raises ImportError without ``datasets``, and whatever the
    hub raises otherwise: the caller words the error for its own command."""
    import datasets

    with _offline_while(offline()):
        return datasets.load_dataset(name, split=split) if split else datasets.load_dataset(name)
