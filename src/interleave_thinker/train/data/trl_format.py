"""Conversion of our examples to TRL's conversational format with images (a ``datasets.Dataset``).

TRL's vision collator fills ``{"type": "image"}`` placeholders, in order, with the row's ``images``;
so each ``<image>`` marker becomes one placeholder exactly where it stood in the text, which keeps the
release's layouts (the critic's ``[before, after, text]``, the guidance planner's interleaving).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from interleave_thinker.agents.messages import IMAGE_MARKER
from interleave_thinker.train.data.examples import CriticRLExample, SFTExample


def datasets_module() -> Any:
    """``datasets``, imported on use (it is heavy and ships no type information)."""
    return importlib.import_module("datasets")


@contextmanager
def datasets_bars(show: bool) -> Iterator[None]:
    """``datasets``' own progress bars ("Saving the dataset") hidden inside the block unless ``show``
    (a command's ``-q``), as they were after it. Nothing is imported when they stay shown."""
    if show:
        yield
        return
    utils = datasets_module().utils
    was_hidden = utils.are_progress_bars_disabled()
    utils.disable_progress_bars()
    try:
        yield
    finally:
        if not was_hidden:
            utils.enable_progress_bars()


def content_parts(text: str) -> list[dict[str, str | None]]:
    """Split a turn on ``<image>`` into text parts and image placeholders, in order."""
    parts: list[dict[str, str | None]] = []
    pieces = IMAGE_MARKER.split(text)
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if i < len(pieces) - 1:
            parts.append({"type": "image", "text": None})
    return parts


def _from_rows(ds: Any, rows: list[dict[str, Any]], features: Any) -> Any:
    """``Dataset.from_list`` that keeps the columns when there are no rows (an empty set still saves)."""
    return ds.Dataset.from_dict({name: [row[name] for row in rows] for name in features}, features=features)


def sft_rows(examples: Sequence[SFTExample]) -> list[dict[str, Any]]:
    return [
        {
            "messages": [{"role": t.role, "content": content_parts(t.content)} for t in example.messages],
            "images": [str(p) for p in example.images],
        }
        for example in examples
    ]


def sft_dataset(examples: Sequence[SFTExample]) -> Any:
    """A TRL SFT dataset: ``messages`` (structured content) and ``images`` (decoded to PIL on access)."""
    ds = datasets_module()
    turn = {"role": ds.Value("string"), "content": [{"type": ds.Value("string"), "text": ds.Value("string")}]}
    features = ds.Features({"messages": [turn], "images": ds.Sequence(ds.Image())})
    return _from_rows(ds, sft_rows(examples), features)


def rl_dataset(examples: Sequence[CriticRLExample]) -> Any:
    """A TRL GRPO dataset: a conversational ``prompt``, ``images`` and the reward's columns."""
    ds = datasets_module()
    turn = {"role": ds.Value("string"), "content": [{"type": ds.Value("string"), "text": ds.Value("string")}]}
    truth = {"success": ds.Value("bool"), "semantics": ds.Value("float64"), "quality": ds.Value("float64")}
    features = ds.Features(
        {
            "prompt": [turn],
            "images": ds.Sequence(ds.Image()),
            "origin_prompt": ds.Value("string"),
            "origin_image_path": ds.Value("string"),
            "edited_image_path": ds.Value("string"),
            "previous_prompt": ds.Value("string"),
            "ground_truth": truth,
        }
    )
    rows = [
        {
            "prompt": [{"role": "user", "content": content_parts(e.problem)}],
            "images": [str(p) for p in e.images],
            "origin_prompt": e.origin_prompt,
            "origin_image_path": str(e.origin_image_path),
            "edited_image_path": str(e.edited_image_path) if e.edited_image_path else None,
            "previous_prompt": e.previous_prompt,
            "ground_truth": {
                "success": e.ground_truth.success,
                "semantics": e.ground_truth.semantics,
                "quality": e.ground_truth.quality,
            },
        }
        for e in examples
    ]
    return _from_rows(ds, rows, features)
