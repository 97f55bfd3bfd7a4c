"""Helpers shared by local backends: resolve a checkpoint reference, pick device and dtype."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ModelNotFoundError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_checkpoint(ref: str) -> str:
    """A local folder, or a Hugging Face id that is cached or on a hub that answers (:mod:`.hub`); a
    path-looking reference that does not exist is an error."""
    if not ref:
        raise ModelNotFoundError("Empty checkpoint reference; give a local folder or a Hugging Face id.")
    path = Path(ref).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelNotFoundError(
                f"Checkpoint {path} is a file; point at the folder that holds config.json."
            )
        return str(_old_grpo_layout(path))
    if _HUB_ID.match(ref) and not ref.startswith((".", "/", "~")):
        from interleave_thinker.backends.hub import ensure_available

        ensure_available(ref)  # offline: one line in seconds; online: the download's size, said first
        return ref
    raise ModelNotFoundError(
        f"Checkpoint path {ref} does not exist. Give an existing folder or a Hugging Face id such as "
        "'InterleaveThinker/InterleaveThinker-Planner-8B', or use --preset tiny to run offline."
    )


def _old_grpo_layout(folder: Path) -> Path:
    """``folder/final`` for a GRPO output folder saved before the final model moved to its root (as SFT's)."""
    final = folder / "final"
    markers = ("config.json", "adapter_config.json")
    if not any((folder / m).is_file() for m in markers) and any((final / m).is_file() for m in markers):
        return final
    return folder


def not_found(ref: str, exc: BaseException) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"Could not load checkpoint '{ref}' ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
        "Check the id or path, that it is downloaded (huggingface-cli download ...) when offline, "
        "or use --preset tiny to run offline."
    )


def pick_device(device: str | None) -> str:
    import torch

    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def pick_dtype(dtype: str, device: str) -> Any:
    """'auto' keeps the checkpoint dtype on GPU and uses float32 on CPU (bf16 matmuls are slow there)."""
    import torch

    if dtype == "auto":
        return "auto" if device.startswith("cuda") else torch.float32
    try:
        return getattr(torch, dtype)
    except AttributeError:
        from interleave_thinker.core.errors import ConfigError

        raise ConfigError(
            f"model.dtype '{dtype}' is not a torch dtype; use auto, bfloat16, float16 or float32."
        ) from None
