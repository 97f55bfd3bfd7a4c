"""A stand-in ``google.genai`` module for tests: the SDK is an optional extra, absent from a fresh
``.[dev,demo]`` install, and the tests only need its ``Client`` constructor to be reachable."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest


def install_genai_client(monkeypatch: pytest.MonkeyPatch, client: Any) -> types.ModuleType:
    """Make ``from google import genai`` / ``import google.genai`` give a module whose ``Client`` is ``client``."""
    genai = types.ModuleType("google.genai")
    genai.Client = client  # type: ignore[attr-defined]
    google = types.ModuleType("google")
    google.genai = genai  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.genai", genai)
    return genai
