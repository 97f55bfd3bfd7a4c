"""The ``checkpoint-N`` folders of a training run: which are complete (what ``--resume`` takes), and what
a save that fails leaves behind (nothing that looks complete, and one line saying why).

Why not transformers' ``get_last_checkpoint``: it takes the highest N whatever the folder holds, so a
save cut short by a full disk (a checkpoint without ``trainer_state.json``, or with a truncated weights
or optimizer file) blocked ``--resume`` although the checkpoint before it was intact. A checkpoint is
complete here when what a resume loads is there and readable, checked cheaply (no tensor is loaded):

- ``trainer_state.json`` (written last by the Trainer) parses and holds ``global_step``;
- each weights file there (full model or adapter; a sharded index's shards all there) readable, a
  safetensors file holding the bytes its header announces (none is required: DeepSpeed and FSDP keep
  theirs in folders of their own, and the trainer state, written last, says the save got that far);
- every ``*.pt`` / ``*.pth`` / ``*.bin`` torch file (optimizer, scheduler, RNG) a readable zip archive,
  as ``torch.save`` writes them, its directory at the end (a cut file has none).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ConfigError, StorageError
from interleave_thinker.core.storage import is_no_space, storage_error

logger = logging.getLogger(__name__)

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STATE = "trainer_state.json"
WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TORCH_FILES = ("*.pt", "*.pth", "*.bin")


def checkpoints(output_dir: Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir``, newest (highest N) first."""
    if not output_dir.is_dir():
        return []
    found = [(int(m[1]), p) for p in output_dir.iterdir() if (m := CHECKPOINT.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found, reverse=True)]


def incomplete(folder: Path) -> str | None:
    """Why the checkpoint ``folder`` cannot be resumed from (what is missing or cut short), or None."""
    state = folder / STATE
    try:
        value = json.loads(state.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{STATE} missing"
    except (OSError, ValueError) as exc:
        return f"{STATE} unreadable ({type(exc).__name__})"
    if not isinstance(value, dict) or not isinstance(value.get("global_step"), int):
        return f"{STATE} holds no global_step"
    weights = [folder / name for name in WEIGHTS if (folder / name).is_file()]
    for index in (folder / name for name in INDEXES):
        if index.is_file():
            problem = _index_problem(index)
            if problem:
                return problem
            weights.append(index)
    for path in weights:
        problem = _safetensors_problem(path) if path.suffix == ".safetensors" else None
        if problem:
            return problem
    for pattern in TORCH_FILES:
        for path in folder.glob(pattern):
            if path.name != "training_args.bin" and not _is_zip(path):
                return f"{path.name} cut short"
    return None


def _index_problem(index: Path) -> str | None:
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"{index.name} unreadable"
    missing = sorted(s for s in shards if not (index.parent / s).is_file())
    return f"{missing[0]} missing" if missing else None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file must hold the bytes its header announces (8-byte length, JSON header, data)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > size - 8:
                return f"{path.name} cut short"
            header = json.loads(handle.read(length))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, struct.error, KeyError, TypeError, IndexError):
        return f"{path.name} unreadable"
    return f"{path.name} cut short" if 8 + length + max(ends, default=0) > size else None


def _is_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def newest_complete(output_dir: Path, *, warn: bool = True) -> Path | None:
    """The newest complete checkpoint of ``output_dir`` (None when there is none); each newer, incomplete
    one is named in one warning (``warn``), with why, so the user knows what ``--resume`` passed over.
    Only incomplete ones: :class:`ConfigError` naming them."""
    skipped: list[str] = []
    for folder in checkpoints(output_dir):
        reason = incomplete(folder)
        if reason is None:
            if skipped and warn:
                logger.warning(
                    "--resume: skipped the incomplete %s (a save cut short, e.g. by a full disk); resuming "
                    "from %s.",
                    "; ".join(skipped),
                    folder,
                )
            return folder
        skipped.append(f"{folder} ({reason})")
    if skipped:
        raise ConfigError(
            f"--resume: no complete checkpoint in {output_dir}; incomplete: {'; '.join(skipped)}. Move them "
            "aside and train without --resume, or set output_dir to another folder."
        )
    return None


def guard_saves(trainer: Any) -> None:
    """Make a failed checkpoint save of ``trainer`` leave no folder that looks complete, and say why in one
    line: ``no space left while saving checkpoint-N under PATH`` for a full disk (torch reports it as
    ``unexpected pos``, without the errno, so the free space is asked), else the storage fault or the
    error as it came."""
    save: Callable[..., Any] = trainer._save_checkpoint

    def guarded(model: Any, trial: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return save(model, trial, *args, **kwargs)
        except Exception as exc:
            folder = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
            if trainer.args.should_save:
                _remove_partial(folder)
            told = _save_failed(folder, exc)
            if told is exc:
                raise
            raise told from exc

    trainer._save_checkpoint = guarded


def _remove_partial(folder: Path) -> None:
    """The partial checkpoint goes (it frees space, and nothing may resume from it); when it cannot be
    removed, it is renamed so that no ``checkpoint-N`` pattern matches it."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        try:
            folder.rename(folder.with_name(f"{folder.name}.incomplete"))
        except OSError:
            logger.warning("%s: a failed save left this folder; remove it before --resume.", folder)


def _save_failed(folder: Path, exc: Exception) -> Exception:
    if is_no_space(exc) or _disk_full(folder.parent):
        return StorageError(
            f"no space left while saving {folder.name} under {folder.parent}; the partial folder was "
            "removed. Free space there, then run the same command with --resume (it continues from the "
            "newest complete checkpoint)."
        )
    storage = storage_error(exc, f"saving {folder.name} under {folder.parent}")
    return storage if storage is not None else exc


def _disk_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < 16 * 2**20
    except OSError:
        return False
