"""The ``planner_rl`` rows of FastVideo's InterleaveThinker branch (``fix/interleave-thinker-review``), read
with its fields in its priority: ``normalize_planner_rl_record`` (``fastvideo/train/models/interleave_thinker/
data.py``), ``_planner_instruction`` and ``_planner_image_paths`` (``planner.py``) and
``_planner_score_from_item`` (``fastvideo/train/methods/rl/rewards/interleave_thinker.py``). Unlike the
branch, a score outside 0-1 or a whitespace-only text is an issue of the row, not coerced.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from interleave_thinker.agents.messages import count_image_markers
from interleave_thinker.train.data.examples import PlannerRLExample
from interleave_thinker.train.data.issues import PathPart
from interleave_thinker.train.data.record_reader import RecordReader

PLANNER_RL_TEXT = ("instruction", "text_input", "origin_prompt", "prompt")
"""The request's text, in the FastVideo branch's priority (``normalize_planner_rl_record``: the first
non-empty string; a row's ``messages`` first user turn stands in for an absent ``instruction``)."""
PLANNER_RL_IMAGE_LISTS = ("input_image_paths", "images", "image_paths", "image")
"""The request's images, the first non-empty list in the branch's priority (``images`` is copied into an
absent ``input_image_paths``; ``_planner_image_paths``), then :data:`PLANNER_RL_IMAGE_PATHS`; ``image``
is ours."""
PLANNER_RL_IMAGE_PATHS = ("input_image_path", "image_path", "origin_image_path")
PLANNER_RL_SCORES = ("planner_score", "plan_score", "reward", "score")
"""The row's plan score, the first present in the branch's priority (``_planner_score_from_item``), then
the same names inside ``ground_truth`` / ``evaluation``."""


def _planner_rl_text(obj: dict[str, Any], r: RecordReader) -> tuple[str, str | None]:
    """The first non-empty text of :data:`PLANNER_RL_TEXT` (``messages`` standing in for ``instruction``)."""
    candidates = dict(obj)
    if "messages" in obj and "instruction" not in obj and isinstance(obj["messages"], list):
        user = next((m for m in obj["messages"] if isinstance(m, dict) and m.get("role") == "user"), None)
        if user is not None and isinstance(user.get("content"), str):
            candidates["instruction"] = user["content"]
    for name in PLANNER_RL_TEXT:
        value = candidates.get(name)
        if isinstance(value, str) and value.strip():
            return name, value
    present = [n for n in PLANNER_RL_TEXT if candidates.get(n) is not None]  # the first says what is wrong
    names = present or list(PLANNER_RL_TEXT)
    return names[0], r.string(candidates, (), *names, empty=False)


def _planner_rl_images(obj: dict[str, Any], r: RecordReader) -> list[Path] | None:
    for name in PLANNER_RL_IMAGE_LISTS:
        value = obj.get(name)
        if isinstance(value, list) and value:
            found = [r.image(item, (name, i)) for i, item in enumerate(value)]
            return None if any(p is None for p in found) else [p for p in found if p is not None]
        if isinstance(value, str) and value and name in ("images", "image"):  # ours: one path as a string
            found_one = r.image(value, (name,))
            return None if found_one is None else [found_one]
    for name in PLANNER_RL_IMAGE_PATHS:
        value = obj.get(name)
        if isinstance(value, str) and value:
            path = r.image(value, (name,))
            return None if path is None else [path]
    return []


def _planner_rl_score(obj: dict[str, Any], r: RecordReader) -> tuple[bool, float | None]:
    """(valid, score): the first present of :data:`PLANNER_RL_SCORES`, at the top, then in the truth."""
    truth = obj.get("ground_truth", obj.get("evaluation"))
    if isinstance(truth, str):
        with contextlib.suppress(json.JSONDecodeError):
            truth = json.loads(truth)
    places: list[tuple[tuple[PathPart, ...], dict[str, Any]]] = [((), obj)]
    if isinstance(truth, dict):
        places.append((("ground_truth" if "ground_truth" in obj else "evaluation",), truth))
    for where, holder in places:
        name = next((n for n in PLANNER_RL_SCORES if holder.get(n) is not None), None)
        if name is None:
            continue
        value = holder[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            r.issue((*where, name), f"must be a number from 0 to 1, got {value!r}")
            return False, None
        return True, float(value)
    return True, None


def parse_planner_rl(obj: dict[str, Any], r: RecordReader) -> PlannerRLExample | None:
    field, text = _planner_rl_text(obj, r)
    images = _planner_rl_images(obj, r)
    valid, score = _planner_rl_score(obj, r)
    if r.issues or not valid or text is None or images is None:
        return None
    if count_image_markers(text) != len(images):
        r.issue(
            ("images",),
            f"{len(images)} image(s) but {count_image_markers(text)} <image> marker(s) in {field}; "
            "put one <image> where each image belongs",
        )
        return None
    return PlannerRLExample(text, tuple(images), score)
