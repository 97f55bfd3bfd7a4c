"""Shared test fixtures: the ../shared material (skipped cleanly when absent) and an isolated home."""

from __future__ import annotations

import os
from pathlib import Path

from interleave_thinker.tiny.pinned import PINNED_NUMERICS

# The test process (and the services it starts) runs with the tiny builds' kernel caps and thread counts,
# set before anything imports torch. Not MKL's reproducible mode: it makes results depend on the thread
# count, and tests compare a served generator (its own thread count) with the local one. See docs/testing.md.
os.environ.update({k: v for k, v in PINNED_NUMERICS.items() if k != "MKL_CBWR"})

import pytest

SHARED_ENV = "INTERLEAVE_THINKER_SHARED"
REPO = Path(__file__).resolve().parents[1]


def shared_path(*parts: str) -> Path:
    """A path under the read-only ``shared`` folder beside the checkout; skip the test when absent."""
    root = Path(os.environ.get(SHARED_ENV, REPO.parent / "shared"))
    path = root.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared material {path} is not available")
    return path


@pytest.fixture
def prompts_dir() -> Path:
    return shared_path("reference", "prompts")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test downloads or touches the user's caches, except the (expensive, deterministic) tiny models."""
    home = tmp_path_factory.mktemp("home")
    tiny = os.environ.get("INTERLEAVE_THINKER_TINY_DIR") or str(
        Path.home() / ".cache" / "interleave-thinker" / "tiny"
    )
    monkeypatch.setenv("INTERLEAVE_THINKER_TINY_DIR", tiny)
    monkeypatch.setenv("INTERLEAVE_THINKER_HOME", str(home))
    monkeypatch.setenv("INTERLEAVE_THINKER_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("INTERLEAVE_THINKER_PROMPTS", raising=False)
    monkeypatch.delenv("INTERLEAVE_THINKER_PROMPTS_URL", raising=False)
    return home
