"""Reproducibility across machines: the tiny cache and the format training give byte-identical weights
when built in fresh folders, whatever CPU kernels and thread count the calling process would use."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.tiny import ensure_tiny_models
from interleave_thinker.testing.tiny_format import _build_one

pytestmark = pytest.mark.slow


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*.safetensors"))
    }


def build_fresh(root: Path, monkeypatch: pytest.MonkeyPatch, *, isa: str, threads: str) -> dict[str, str]:
    """A fresh tiny cache and 6 steps of the critic's format training, as another machine would run them:
    the caller's environment selects other kernels (``ATEN_CPU_CAPABILITY``) and another thread count."""
    with monkeypatch.context() as patch:
        patch.setenv("ATEN_CPU_CAPABILITY", isa)
        patch.setenv("OMP_NUM_THREADS", threads)
        patch.setenv("MKL_NUM_THREADS", threads)
        paths = ensure_tiny_models(root / "tiny")
        _build_one(root / "critic", "critic", builtin_templates(), paths.planner, steps=6)
    return digests(root)


def test_two_fresh_builds_give_byte_identical_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = build_fresh(tmp_path / "a", monkeypatch, isa="default", threads="1")
    second = build_fresh(tmp_path / "b", monkeypatch, isa="avx2", threads="2")
    assert {"tiny/planner/model.safetensors", "tiny/critic/model.safetensors"} <= set(first)
    assert "critic/model/model.safetensors" in first  # the format-trained critic
    assert first == second
