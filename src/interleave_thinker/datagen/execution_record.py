"""The release's ``execution_record.json``, written beside each ``trace.json`` of `data generate`.

Why: the authors' downstream scripts (filters, exports) read this format, so our runs feed them as
they are. The record is made from the trace alone, so a resumed run writes the same record.

Format (UPSTREAM.md)::

    {"user_input", "global_context": {"reasoning", "execution_plan"},
     "steps": [{"step", "prompt", "refine_prompt", "source_img", "target_img", "success", "reasoning"}]}

``steps`` holds one entry per critic call that gave a verdict, in order (a step retried three times
has three entries). ``step`` is the step's position in the plan (what our seeds use), ``prompt`` the
step's planned prompt, ``refine_prompt``, ``success`` and ``reasoning`` the critic's verdict. Image
paths are relative to the run folder; the "before" image of a text-to-image attempt is a 1024x1024
white PNG written once as ``images/white_canvas.png``, as the authors use one. Two keys go beyond the
release's: ``semantics`` and ``quality`` (the judge's SC and PQ of the attempt, when judged), and
``images`` (the request's input images, when it had any), and ``status`` and ``error`` for a request that
did not succeed; readers that do not know them skip them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interleave_thinker.agents.messages import white_canvas
from interleave_thinker.core.images import png_bytes
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR, image_path
from interleave_thinker.core.types import WHITE_CANVAS, Attempt, Trace
from interleave_thinker.train.data.trajectories import RECORD_FILE

CANVAS_FILE = "white_canvas.png"


def _image(name: str) -> str:
    return f"{IMAGES_DIR}/{CANVAS_FILE if name == WHITE_CANVAS else name}"


def _entry(position: int, planned: str, attempt: Attempt) -> dict[str, Any] | None:
    """One critic call; None for an attempt with no image or no verdict (nothing to learn from)."""
    verdict = attempt.verdict
    if verdict is None or attempt.image_file is None:
        return None
    entry: dict[str, Any] = {
        "step": position,
        "prompt": planned,
        "refine_prompt": verdict.refine_prompt,
        "source_img": _image(attempt.before_image),
        "target_img": _image(attempt.image_file),
        "success": verdict.success,
        "reasoning": verdict.reasoning or "",
    }
    scores = attempt.scores
    if scores is not None and scores.sc is not None and scores.pq is not None:
        entry.update(semantics=scores.sc, quality=scores.pq)
    return entry


def execution_record(trace: Trace) -> dict[str, Any] | None:
    """The record of ``trace``; None when the run has no plan (nothing to record)."""
    plan = trace.planner.plan
    if plan is None:
        return None
    entries = [
        entry
        for position, step in enumerate(trace.steps, start=1)
        if step.planned_prompt is not None
        for attempt in step.attempts
        if (entry := _entry(position, step.planned_prompt, attempt)) is not None
    ]
    record: dict[str, Any] = {
        "user_input": trace.request.text,
        "global_context": {
            "reasoning": plan.reasoning or "",
            "execution_plan": [step.model_dump() for step in plan.steps],
        },
        "steps": entries,
    }
    if trace.input_images:
        record["images"] = [_image(name) for name in trace.input_images]
    if trace.status != "succeeded":  # a failed request says so (a succeeded one stays the release's format)
        record.update(status=trace.status, error=trace.error or "")
    return record


def write_execution_record(folder: Path, trace: Trace) -> Path | None:
    """Write ``execution_record.json`` (and the white canvas it points to) into the run ``folder``."""
    record = execution_record(trace)
    if record is None:
        return None
    uses_canvas = any(e["source_img"] == _image(WHITE_CANVAS) for e in record["steps"])
    canvas = image_path(folder, CANVAS_FILE)
    if uses_canvas and not canvas.is_file():
        canvas.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(canvas, png_bytes(white_canvas()))
    path = folder / RECORD_FILE
    write_atomic(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path
