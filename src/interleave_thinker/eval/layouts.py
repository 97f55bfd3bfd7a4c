"""The benchmarks' official output layouts, written from the traces of a generation run.

- WISE: ``OUT/{prompt_id}.png`` (what ``vllm_eval.py`` / ``gpt_eval.py`` read as ``IMAGE_DIR``);
- RISEBench: ``OUT/images/{category}/{index}.png`` (``gpt_eval.py --output OUT``);
- UEval: ``OUT/submission.json``, ``[{"id", "prompt", "task", "text_answer", "image_answer": [paths]}]``
  as the release's runner writes it, image paths absolute so the official scorer finds them from any
  working directory (score with ``--outputs OUT/submission.json``; the name is not ``results.json``,
  which ``interleave-thinker report`` rewrites in the batch format).

Single-image benchmarks take the last accepted image of a finished (succeeded) trace; a failed or
unfinished item gets no file and is listed as missing, which the scorers count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR
from interleave_thinker.core.types import Trace
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.runtime.reports import release_text_answer
from interleave_thinker.runtime.store import RunStore

SUBMISSION = "submission.json"


def final_image(store: RunStore, item_id: str, trace: Trace) -> Path | None:
    """The last accepted image of a succeeded trace (the sequence's final picture), or None."""
    if trace.status != "succeeded":
        return None
    accepted = [step.accepted_image for step in trace.steps if step.accepted_image]
    return store.request_dir(item_id) / IMAGES_DIR / accepted[-1] if accepted else None


def layout_path(out: Path, item: EvalItem) -> Path:
    """Where the official layout puts the single image of ``item`` (WISE and RISEBench)."""
    if item.benchmark == "wise":
        return out / f"{item.id}.png"
    if item.benchmark == "rise":
        return out / "images" / item.category / f"{item.id}.png"
    raise ValueError(f"{item.benchmark} has no single-image layout")


def write_item_image(out: Path, store: RunStore, item: EvalItem, trace: Trace) -> Path | None:
    """Copy the item's final image into the layout (unchanged bytes: the recorder already wrote PNG)."""
    source = final_image(store, item.id, trace)
    if source is None or not source.is_file():
        return None
    target = layout_path(out, item)
    data = source.read_bytes()
    if not target.is_file() or target.read_bytes() != data:
        write_atomic(target, data)
    return target


def ueval_entry(store: RunStore, item: EvalItem, trace: Trace, *, mode: str) -> dict[str, Any]:
    """One submission record; in base mode the generator writes no text, so the text answer is empty."""
    images = [
        str((store.request_dir(item.id) / IMAGES_DIR / step.accepted_image).resolve())
        for step in trace.steps
        if step.accepted_image
    ]
    return {
        "id": item.id,
        "prompt": item.prompt,
        "task": item.category,
        "image_answer": images,
        "text_answer": release_text_answer(trace) if mode == "agentic" else "",
    }


def write_layout(
    out: Path, store: RunStore, items: list[EvalItem], traces: dict[str, Trace], *, mode: str
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
        if item.benchmark == "ueval":
            entries.append(ueval_entry(store, item, trace, mode=mode))
            written.append(item.id)
        elif write_item_image(out, store, item, trace) is not None:
            written.append(item.id)
        else:
            missing.append(item.id)
    if items and items[0].benchmark == "ueval":
        write_atomic(out / SUBMISSION, json.dumps(entries, ensure_ascii=False, indent=2) + "\n")
    return {"written": written, "missing": missing}
