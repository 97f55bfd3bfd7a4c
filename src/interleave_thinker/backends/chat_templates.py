"""Chat templates for training: inference template -> its variant with ``{% generation %}`` markers.

Why in ``backends``: a backend kind that ships its own chat template (the ``tiny`` kind) registers the
training variant when the package root registers the kind, and that must not load ``train`` (whose SFT
reads this table through ``train/sft/templates.py``). Plain data: importing this module loads nothing.
"""

from __future__ import annotations

TRAINING_VARIANTS: dict[str, str] = {}
"""Inference chat template -> the same text with ``{% generation %}`` markers, for templates TRL does not
know. Filled through :func:`register_training_template`."""


def register_training_template(inference: str, training: str) -> None:
    """Train checkpoints whose processor uses ``inference`` with ``training`` (same text, with markers)."""
    TRAINING_VARIANTS[inference] = training
