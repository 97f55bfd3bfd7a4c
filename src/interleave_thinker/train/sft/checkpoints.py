"""Trained checkpoints for the pipeline: full models load as they are; LoRA adapters load on their base.

A LoRA run writes an adapter folder (``adapter_config.json`` naming the base model) with the
processor beside it. transformers loads such a folder directly when PEFT is installed, so
``transformers:<adapter folder>`` works in the pipeline; :func:`merge_adapter` writes a standalone
merged copy for serving (vLLM) or for machines without PEFT.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ModelNotFoundError

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file()


def adapter_base(folder: Path) -> str:
    """The base model an adapter was trained on, as recorded in its config."""
    try:
        data: dict[str, Any] = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelNotFoundError(f"{folder / ADAPTER_CONFIG} cannot be read ({exc}).") from None
    base = data.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ModelNotFoundError(
            f"{folder / ADAPTER_CONFIG} names no base_model_name_or_path; give the adapter folder `train sft` "
            "saved (its adapter_config.json names the base model)."
        )
    return base


def merge_adapter(adapter_dir: Path, out_dir: Path, *, base: str | None = None) -> Path:
    """Load ``base`` (default: the one the adapter names), apply the adapter, merge and save with the processor."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    base_ref = base or adapter_base(adapter_dir)
    model = AutoModelForImageTextToText.from_pretrained(base_ref, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out_dir))
    AutoProcessor.from_pretrained(str(adapter_dir)).save_pretrained(str(out_dir))
    return out_dir
