"""A stand-in ``google.genai`` module for tests: the SDK is an optional extra, absent from a fresh
``.[dev,demo]`` install, and the tests only need its ``Client`` constructor to be reachable; and a
client of an image model that records what a call sends (:class:`ImageModels`)."""

from __future__ import annotations

import io
import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image


def install_genai_client(monkeypatch: pytest.MonkeyPatch, client: Any) -> types.ModuleType:
    """Make ``from google import genai`` / ``import google.genai`` give a module whose ``Client`` is ``client``."""
    genai = types.ModuleType("google.genai")
    genai.Client = client  # type: ignore[attr-defined]
    google = types.ModuleType("google")
    google.genai = genai  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.genai", genai)
    return genai


@dataclass
class ImageModels:
    """``client.models`` of a Gemini image model, in the SDK's reply shape: records each call's
    ``model``, ``contents`` and ``config`` as sent, and answers one flat PNG at the asked aspect ratio
    (32 pixels a unit) whose colour counts the image parts, so a dropped reference shows."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def models(self) -> ImageModels:
        return self

    def generate_content(self, *, model: str, contents: list[Any], config: dict[str, Any]) -> Any:
        self.calls.append({"model": model, "contents": list(contents), "config": config})
        images = sum(1 for part in contents if isinstance(part, dict) and "inline_data" in part)
        width, height = (int(v) * 32 for v in config["image_config"]["aspect_ratio"].split(":"))
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (40 * images % 256, 90, 160)).save(buffer, format="PNG")
        blob = SimpleNamespace(data=buffer.getvalue(), mime_type="image/png")
        part = SimpleNamespace(inline_data=blob, text=None, thought=False)
        return SimpleNamespace(candidates=[SimpleNamespace(content=SimpleNamespace(parts=[part]))])

    def inline_images(self, call: int = -1) -> list[bytes]:
        """The image bytes of one call's ``contents``, in order."""
        parts = self.calls[call]["contents"]
        return [p["inline_data"]["data"] for p in parts if isinstance(p, dict) and "inline_data" in p]

    def close(self) -> None:
        pass
