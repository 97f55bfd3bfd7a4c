"""Write built examples as a self-contained folder in every format users train with.

``out/`` holds ``images/`` (each image once, named by content hash), LLaMA-Factory ShareGPT files
with a ``dataset_info.json`` entry per file (merged with the entries already there), EasyR1's
``critic_rl.jsonl``, TRL datasets saved with ``save_to_disk`` under ``trl/`` (non-empty sets only), and
``stats.json``. Image paths in the files are relative to ``out/``, so our loaders (default image folder:
the file's folder) read the same examples back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import check_folder, confine, write_atomic
from interleave_thinker.core.untrusted import MAX_IMAGE_BYTES, MAX_JSON_BYTES, load_json, read_bounded
from interleave_thinker.train.data.builder import BuildResult
from interleave_thinker.train.data.examples import CriticRLExample, SFTExample
from interleave_thinker.train.data.trl_format import rl_dataset, sft_dataset

IMAGES = "images"
DATASET_INFO = "dataset_info.json"
SHAREGPT_TAGS = {
    "role_tag": "role",
    "content_tag": "content",
    "user_tag": "user",
    "assistant_tag": "assistant",
    "system_tag": "system",
}


class ImageCopier:
    """Copies each distinct image once into ``out/images`` and returns its new absolute path.

    The sources were checked when their runs were read (``core/run_folder.run_image``); the read is
    bounded again here, and the copy is an atomic write, which replaces a link planted at its name
    instead of writing through it (and refuses an ``images/`` that links out of ``out``)."""

    def __init__(self, out: Path, max_bytes: int = MAX_IMAGE_BYTES) -> None:
        self.out, self.max_bytes = out, max_bytes
        self.done: dict[Path, Path] = {}

    def __call__(self, path: Path) -> Path:
        if path not in self.done:
            data = read_bounded(path, self.max_bytes, what="image")
            digest = hashlib.sha256(data).hexdigest()[:16]
            target = self.out / IMAGES / f"{digest}{path.suffix.lower() or '.png'}"
            if target.is_symlink() or not target.is_file():
                write_atomic(target, data)
            self.done[path] = target.resolve()
        return self.done[path]


def clear_folder(target: Path) -> None:
    """Remove the saved dataset ``target`` (never through a link out of the confined ``out``)."""
    check_folder(target)
    if target.is_symlink():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)


def relocate_sft(example: SFTExample, copy: ImageCopier) -> SFTExample:
    """``example`` pointing at its images' copies in the export folder."""
    return dataclasses.replace(example, images=tuple(copy(p) for p in example.images))


def sharegpt_info(file_name: str) -> dict[str, Any]:
    """LLaMA-Factory's ``dataset_info.json`` entry for a ShareGPT file with images."""
    return {
        "file_name": file_name,
        "formatting": "sharegpt",
        "columns": {"messages": "messages", "images": "images"},
        "tags": SHAREGPT_TAGS,
    }


def merge_dataset_info(out: Path, entries: dict[str, Any]) -> None:
    """Add ``entries`` to ``out/dataset_info.json``, keeping the entries of earlier exports and builds
    (LLaMA-Factory reads one such file per folder, so each corpus written there must stay listed)."""
    path = out / DATASET_INFO
    info: Any = {}
    if path.is_file():
        try:
            info = load_json(read_bounded(path, MAX_JSON_BYTES, what=DATASET_INFO))
        except ValueError as exc:
            raise InputError(f"{path}: not JSON ({exc}); remove it or choose another --out.") from None
        if not isinstance(info, dict):
            raise InputError(
                f"{path}: expected a JSON object of datasets; remove it or choose another --out."
            )
    info.update(entries)
    write_atomic(path, json.dumps(info, indent=2) + "\n")


def _relocate(result: BuildResult, copy: ImageCopier) -> BuildResult:
    def sft(e: SFTExample) -> SFTExample:
        return relocate_sft(e, copy)

    def rl(e: CriticRLExample) -> CriticRLExample:
        return dataclasses.replace(
            e,
            images=tuple(copy(p) for p in e.images),
            origin_image_path=copy(e.origin_image_path),
            edited_image_path=copy(e.edited_image_path) if e.edited_image_path else None,
        )

    return BuildResult(
        planner_sft=[sft(e) for e in result.planner_sft],
        critic_sft=[sft(e) for e in result.critic_sft],
        critic_rl=[rl(e) for e in result.critic_rl],
        stats=result.stats,
    )


def sharegpt_record(example: SFTExample, out: Path) -> dict[str, Any]:
    return {
        "messages": [{"role": t.role, "content": t.content} for t in example.messages],
        "images": [str(p.relative_to(out)) for p in example.images],
    }


def easyr1_record(example: CriticRLExample, out: Path) -> dict[str, Any]:
    """The release's ``critic_rl.jsonl`` row (``evaluation`` is the ground truth the reward reads)."""
    return {
        "problem": example.problem,
        "images": [str(p.relative_to(out)) for p in example.images],
        "origin_prompt": example.origin_prompt,
        "origin_image_path": str(example.origin_image_path.relative_to(out)),
        "edited_image_path": str(example.edited_image_path.relative_to(out))
        if example.edited_image_path
        else None,
        "previous_prompt": example.previous_prompt,
        "evaluation": dataclasses.asdict(example.ground_truth),
    }


def export(
    result: BuildResult, out: Path, *, trl: bool = True, failed: list[dict[str, str]] | None = None
) -> BuildResult:
    """Write every format into ``out`` and return the examples as they now point into it; ``failed``
    (runs or records left out, each with its one-line reason) goes into ``stats.json`` as ``failed_runs``."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    confine(out)
    moved = _relocate(result, ImageCopier(out))
    info: dict[str, Any] = {}
    for name, examples in (("planner_sft", moved.planner_sft), ("critic_sft", moved.critic_sft)):
        records = [sharegpt_record(e, out) for e in examples]
        write_atomic(out / f"{name}.json", json.dumps(records, ensure_ascii=False, indent=2) + "\n")
        info[f"interleave_{name}"] = sharegpt_info(f"{name}.json")
    merge_dataset_info(out, info)
    lines = [json.dumps(easyr1_record(e, out), ensure_ascii=False) for e in moved.critic_rl]
    write_atomic(out / "critic_rl.jsonl", "".join(line + "\n" for line in lines))
    stats = {**dataclasses.asdict(moved.stats), "failed_runs": failed or []}
    write_atomic(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    if trl:
        datasets = {
            "planner_sft": (len(moved.planner_sft), lambda: sft_dataset(moved.planner_sft)),
            "critic_sft": (len(moved.critic_sft), lambda: sft_dataset(moved.critic_sft)),
            "critic_rl": (len(moved.critic_rl), lambda: rl_dataset(moved.critic_rl)),
        }
        for name, (count, make) in datasets.items():
            target = out / "trl" / name
            clear_folder(target)
            if count:  # datasets cannot load an empty saved dataset back, so none is written
                make().save_to_disk(str(target))
    return moved
