"""The benchmarks' official output layouts, written from the traces of a generation run.

A :class:`Layout` is one of two shapes; each benchmark module says which, and where:

- one image per item at ``image(out, id, category, suffix)``: WISE ``OUT/{prompt_id}.png`` (what
  ``vllm_eval.py`` / ``gpt_eval.py`` read as ``IMAGE_DIR``), RISEBench
  ``OUT/images/{category}/{index}.png`` (``gpt_eval.py --output OUT``);
- a submission (``image`` None): ``OUT/submission.json``,
  ``[{"id", "prompt", "task", "text_answer", "image_answer": [paths]}]`` as UEval's release runner writes
  it, image paths absolute so the official scorer finds them from any working directory (score with
  ``--outputs OUT/submission.json``; the name is not ``results.json``, which ``interleave-thinker
  report`` rewrites in the batch format).

Every image written is one the sequence shows (``Trace.shown_images``): a step repaired by
``loop.repair_budget`` gives its repaired image, never the original. Single-image benchmarks take the
last shown image of a finished (succeeded) trace; a failed or
unfinished item gets no file and is listed as missing, which the scorers count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR
from interleave_thinker.core.types import Trace
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.runtime.reports import answer_row
from interleave_thinker.runtime.store import RunStore

SUBMISSION = "submission.json"
ImagePath = Callable[[Path, str, str, str], Path]
"""``(out, item id, category, suffix) -> path`` of an item's single output image."""


@dataclass(frozen=True)
class Layout:
    """Where a benchmark's outputs go: one image per item (``image``) or a submission JSON (None)."""

    image: ImagePath | None = None
    suffixes: tuple[str, ...] = ("png",)
    """Suffixes the scorer accepts, in the order it looks (generation writes the first)."""

    @property
    def submission(self) -> bool:
        return self.image is None

    def candidates(self, out: Path, item_id: str, category: str) -> list[Path]:
        """Where an item's output image may be (one per accepted suffix); none for a submission."""
        if self.image is None:
            return []
        return [self.image(out, item_id, category, suffix) for suffix in self.suffixes]


def final_image(store: RunStore, item_id: str, trace: Trace) -> Path | None:
    """The last image the sequence of a succeeded trace shows (``Trace.shown_images``: a repaired image
    in place of its original), or None."""
    if trace.status != "succeeded":
        return None
    shown = trace.shown_images()
    return store.request_dir(item_id) / IMAGES_DIR / shown[-1][1] if shown else None


def layout_path(layout: Layout, out: Path, item: EvalItem) -> Path:
    """Where ``layout`` puts the single image of ``item``."""
    if layout.image is None:
        raise ValueError(f"{item.benchmark} writes a submission, not one image per item")
    return layout.image(out, item.id, item.category, layout.suffixes[0])


def write_item_image(layout: Layout, out: Path, store: RunStore, item: EvalItem, trace: Trace) -> Path | None:
    """Copy the item's final image into the layout (unchanged bytes: the recorder already wrote PNG)."""
    source = final_image(store, item.id, trace)
    if source is None or not source.is_file():
        return None
    target = layout_path(layout, out, item)
    data = source.read_bytes()
    if not target.is_file() or target.read_bytes() != data:
        write_atomic(target, data)
    return target


def submission_entry(store: RunStore, item: EvalItem, trace: Trace, *, mode: str) -> dict[str, Any]:
    """One submission record (absolute image paths); in base mode the generator writes no text, so the
    text answer is empty."""
    images = (store.request_dir(item.id) / IMAGES_DIR).resolve()
    return answer_row(
        item.id,
        item.prompt,
        item.category,
        trace,
        lambda name: str(images / name),
        text_answer=mode == "agentic",
    )


def write_layout(
    layout: Layout, out: Path, store: RunStore, items: list[EvalItem], traces: dict[str, Trace], *, mode: str
) -> dict[str, Any]:
    """Write the whole layout for ``items``; returns which items have an output and which are missing."""
    written: list[str] = []
    missing: list[str] = []
    entries: list[dict[str, Any]] = []
    for item in items:
        trace = traces.get(item.id)
        if trace is None or trace.status != "succeeded":
            missing.append(item.id)
            continue
        if layout.submission:
            entries.append(submission_entry(store, item, trace, mode=mode))
            written.append(item.id)
        elif write_item_image(layout, out, store, item, trace) is not None:
            written.append(item.id)
        else:
            missing.append(item.id)
    if layout.submission:
        write_atomic(out / SUBMISSION, json.dumps(entries, ensure_ascii=False, indent=2) + "\n")
    return {"written": written, "missing": missing}
