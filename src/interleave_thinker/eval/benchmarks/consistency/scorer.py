"""Consistency of a sequence: a VLM judge rates each pair of consecutive accepted images with our rubric.

This is interleave-thinker's own measure, not a published protocol: the rubric is ours
(``prompts/consistency/``, pinned by SHA-256 in :mod:`interleave_thinker.eval.benchmarks.consistency.protocol`),
there is no official judge and no published number, so scores compare only runs judged alike.

A sequence is one run folder (``requests/<id>/`` of a `batch` or `eval generate` folder, or a `run`
folder): its ``trace.json`` and the image each step shows (``Trace.shown_images``: the repaired image of a
step ``loop.repair_budget`` repaired, else the accepted one), in step order, every file bounded and kept
inside its folder. Only a succeeded trace with at least two accepted images is judged; any other is
``missing`` with the reason.

Scale and aggregation: each pair of consecutive accepted images gets ``identity``, ``style`` and
``scene``, numbers from 0 to 10; the pair's score is their mean. A sequence's criteria are the means
over its pairs and its score the mean of its pair scores (0-10). A run's overall (and each category's)
is the mean over its judged sequences, each sequence weighing one. A pair whose reply never parses fails
its sequence (recorded with the pairs that did parse).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker.agents.reply import extract_answer, read_answer
from interleave_thinker.core.errors import InputError, ParseError
from interleave_thinker.core.images import image_header
from interleave_thinker.core.run_folder import IMAGES_DIR, MANIFEST, REQUESTS, TRACE_FILE, load_trace
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import StepRecord, Trace
from interleave_thinker.core.untrusted import MAX_JSON_BYTES, load_json, read_bounded
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.judging import JudgeClient, JudgeImage, JudgeRequest, Part, Question
from interleave_thinker.eval.outputs import Limits, file_digest, inside, read_image_bytes
from interleave_thinker.eval.prompts import PromptSet
from interleave_thinker.eval.scoring import ItemResult, bind, mean

CRITERIA = ("identity", "style", "scene")
SCALE = 10.0
SETTINGS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 1024}
SYSTEM, PAIR = "consistency_system", "consistency_pair"
MAX_TEXT_CHARS = 2_000
MAX_REASON_CHARS = 300
AGGREGATION = (
    "pair = mean of identity, style, scene (each 0-10); sequence = mean of its pair scores; "
    "overall and category = mean over sequences"
)
RUBRIC = "interleave-thinker's own rubric (identity, style, scene continuity); not a published protocol"
GENERATION = "eval.json"
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
UNCATEGORISED = "all"


class Missing(InputError):
    """A sequence with nothing to judge (no trace, not succeeded, fewer than two accepted images)."""


@dataclass(frozen=True)
class Sequence:
    folder: Path
    trace: Trace
    steps: list[tuple[int, StepRecord, Path]]
    """(1-based position in the trace, the step, the path of the image it shows), in step order: a
    repaired step's repaired image (``Trace.shown_images``), never its original."""


# --- reading run folders -------------------------------------------------------------------------


def runs_root(outputs: Path) -> Path:
    return outputs if outputs.is_dir() else outputs.parent


def run_dir(outputs: Path, item_id: str) -> Path:
    """The run folder of ``item_id``: ``requests/<id>/``, or ``outputs`` itself when it is one run."""
    root = runs_root(outputs)
    if (root / TRACE_FILE).is_file() and root.name == item_id:
        return root
    return root / REQUESTS / item_id


def _trace(folder: Path, root: Path) -> Trace:
    path = folder / TRACE_FILE
    if not path.exists():
        raise Missing(f"{path}: no trace (the request was not run in this folder).")
    try:
        return load_trace(inside(root, path), max_bytes=MAX_JSON_BYTES)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable trace ({type(exc).__name__}).") from None


def read_sequence(outputs: Path, item_id: str) -> Sequence:
    """The sequence of ``item_id``; :class:`Missing` when there is nothing to judge."""
    folder = run_dir(outputs, item_id)
    trace = _trace(folder, runs_root(outputs))
    if trace.status != "succeeded":
        raise Missing(f"{folder}: the request {trace.status}; only a finished sequence is judged.")
    steps = [
        (position, trace.steps[position - 1], folder / IMAGES_DIR / name)
        for position, name in trace.shown_images()
    ]
    if len(steps) < 2:
        raise Missing(f"{folder}: {len(steps)} accepted image(s); a sequence needs two to compare.")
    return Sequence(folder, trace, steps)


def _manifest_ids(root: Path) -> list[str]:
    """The ids a `batch` (``batch.json``) or `eval generate` (``eval.json``) folder lists, in order."""
    for name in (MANIFEST, GENERATION):
        try:
            ids = load_json(read_bounded(root / name, MAX_JSON_BYTES, what=name)).get("ids")
        except (InputError, ValueError, AttributeError):
            continue
        if isinstance(ids, list):
            return [str(i) for i in ids]
    return []


def load_runs(root: Path, benchmark: str) -> list[EvalItem]:
    """One item per run folder under ``root`` (the folder's listed ids first, then the rest by name)."""
    if (root / TRACE_FILE).is_file():
        folders = {root.name: root}
    else:
        found = sorted((root / REQUESTS).glob(f"*/{TRACE_FILE}")) if (root / REQUESTS).is_dir() else []
        folders = {path.parent.name: path.parent for path in found}
    if not folders:
        raise InputError(
            f"--outputs {root}: no run folders (requests/<id>/trace.json, or a trace.json); point it at "
            "a `batch` or `eval generate` output folder."
        )
    order = [i for i in _manifest_ids(root) if i in folders]
    order += sorted(set(folders) - set(order))
    return [_item(benchmark, item_id, folders[item_id], root) for item_id in order]


def _item(benchmark: str, item_id: str, folder: Path, root: Path) -> EvalItem:
    try:
        request = _trace(folder, root).request
        prompt, category = clean_text(request.text)[:MAX_TEXT_CHARS], clean_text(request.task or "")
    except InputError:
        prompt, category = "", ""  # scored as a failure, with the reason, when it is judged
    raw = {"id": item_id, "prompt": prompt, "category": category}
    return EvalItem(benchmark, item_id, category, prompt, raw=raw, root=str(root), where=str(folder))


# --- the judge's question and its reply -------------------------------------------------------------


def fill(template: str, values: dict[str, str]) -> str:
    """Each ``{name}`` of ``values`` replaced in one pass (braces inside a value are never filled)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _step_text(step: StepRecord) -> str:
    return clean_text(step.planned_prompt or step.step.generation_prompt or "")[:MAX_TEXT_CHARS]


def build_request(
    prompts: PromptSet,
    trace: Trace,
    first: tuple[int, StepRecord],
    second: tuple[int, StepRecord],
    images: tuple[bytes, bytes],
) -> JudgeRequest:
    values = {
        "request": clean_text(trace.request.text)[:MAX_TEXT_CHARS],
        "first_step": str(first[0]),
        "first_prompt": _step_text(first[1]),
        "second_step": str(second[0]),
        "second_prompt": _step_text(second[1]),
    }
    parts: tuple[Part, ...] = (fill(prompts.texts[PAIR], values), *(JudgeImage(d, _mime(d)) for d in images))
    return JudgeRequest.one_turn(parts, SETTINGS, system=prompts.texts[SYSTEM])


def _mime(data: bytes) -> str:
    kind = image_header(data, 2**62)[0]
    return Image.MIME.get(kind, "image/png")


def _criterion(value: Any, key: str) -> float:
    number = value.get(key)
    if isinstance(number, bool) or not isinstance(number, int | float) or math.isnan(number):
        raise ValueError(f"{key}: expected a number from 0 to 10, got {str(number)[:40]!r}")
    if not 0 <= number <= SCALE:
        raise ValueError(f"{key}: {number} is outside 0-10")
    return float(number)


def parse_pair(reply: str) -> dict[str, Any]:
    """The three criteria (0-10) and the reason of one reply; ValueError when it holds no such object."""
    try:
        value = read_answer(extract_answer(reply), raw=reply).value
    except ParseError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    scores: dict[str, Any] = {key: _criterion(value, key) for key in CRITERIA}
    reason = value.get("reason")
    scores["reason"] = clean_text(reason)[:MAX_REASON_CHARS] if isinstance(reason, str) else None
    return scores


# --- one sequence, and the run --------------------------------------------------------------------


PAIRS_AT_ONCE = 4
"""Pairs of one sequence asked at once: their images are read for them, each file once, and let go after
(a trace claiming 1,000 steps that reuse one 1 MB image took 1.6 GB when all were read and every request
built up front; issue 41, item 4: 101 such steps now raise the peak by 175 MB instead of 584 MB,
``tests/eval/test_eval_consistency.py``). Pairs of one sequence are few; items run side by side."""


def _window_images(sequence: Sequence, start: int, count: int, limits: Limits) -> list[bytes]:
    """The image bytes of steps ``start`` .. ``start + count - 1``; a file named by several steps read once."""
    read: dict[Path, bytes] = {}
    for _, _, path in sequence.steps[start : start + count]:
        if path not in read:
            read[path] = read_image_bytes(sequence.folder / IMAGES_DIR, path, limits)
    return [read[path] for _, _, path in sequence.steps[start : start + count]]


def score_item(
    prompts: PromptSet, client: JudgeClient, outputs: Path, attempts: int, limits: Limits, item: EvalItem
) -> ItemResult:
    """Every pair of the sequence judged at once; the sequence's criteria and score from its pairs."""
    try:
        sequence = read_sequence(outputs, item.id)
    except Missing as exc:
        return ItemResult(item.id, item.category, None, "missing", errors=[str(exc)])
    for path in dict.fromkeys(path for _, _, path in sequence.steps):  # a bad file fails before any call
        read_image_bytes(sequence.folder / IMAGES_DIR, path, limits)
    pairs = list(zip(sequence.steps, sequence.steps[1:], strict=False))
    judgements = []
    for start in range(0, len(pairs), PAIRS_AT_ONCE):  # memory: a window of images, not the whole trace
        window = pairs[start : start + PAIRS_AT_ONCE]
        images = _window_images(sequence, start, len(window) + 1, limits)
        questions = [
            Question(
                build_request(prompts, sequence.trace, a[:2], b[:2], (images[i], images[i + 1])),
                parse_pair,
                attempts,
                f"pair {start + i + 1}",
            )
            for i, (a, b) in enumerate(window)
        ]
        judgements.extend(client.ask_all(item.id, questions))
    rows, errors, replies = [], [], {}
    for index, ((pa, _, image_a), (pb, _, image_b)), judgement in zip(
        range(1, len(pairs) + 1), pairs, judgements, strict=True
    ):
        replies[f"pair {index}"] = judgement.replies
        row: dict[str, Any] = {
            "pair": index,
            "steps": [pa, pb],
            "images": [image_a.name, image_b.name],
        }
        if judgement.ok:
            row.update(judgement.value, score=mean(judgement.value[key] for key in CRITERIA))
        else:
            row["score"] = None
            errors.append(f"pair {index} (steps {pa}-{pb}): {(judgement.errors or ['no reply'])[-1]}")
        rows.append(row)
    judged = [r for r in rows if r["score"] is not None]
    dimensions: dict[str, Any] = {key: mean(r[key] for r in judged) for key in CRITERIA}
    dimensions["pairs"] = rows
    score = None if errors else mean(r["score"] for r in rows)
    status = "failed" if errors else "ok"
    return ItemResult(item.id, item.category, score, status, dimensions, replies, errors)


def output_digest(outputs: Path, limits: Limits, prompts: PromptSet, item: EvalItem) -> str:
    """What a stored score is bound to: the item, its trace, its accepted images and the rubric's digests."""
    rubric = json.dumps(prompts.digests(), sort_keys=True)
    folder = run_dir(outputs, item.id)
    try:
        sequence = read_sequence(outputs, item.id)
    except InputError as exc:  # nothing (yet) to judge: bound to the trace as it is, and the reason
        reason = hashlib.sha256(str(exc).encode("utf-8", "replace")).hexdigest()[:16]
        return bind(item, file_digest(folder, folder / TRACE_FILE, limits), "unjudged:" + reason, rubric)
    images = [file_digest(folder / IMAGES_DIR, path, limits) for _, _, path in sequence.steps]
    return bind(item, file_digest(folder, folder / TRACE_FILE, limits), *images, rubric)


def _block(rows: list[dict[str, Any]]) -> dict[str, Any]:
    block: dict[str, Any] = {"score": mean(r.get("score") for r in rows), "n": len(rows)}
    block.update({key: mean(r.get(key) for r in rows) for key in CRITERIA})
    block["pairs"] = sum(len(r.get("pairs") or []) for r in rows)
    return block


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Overall and per category: the mean sequence score and criteria (0-10), over judged sequences."""
    judged = [r for r in rows if r.get("status") == "ok" and isinstance(r.get("score"), int | float)]
    names: dict[str, list[dict[str, Any]]] = {}
    for row in judged:
        names.setdefault(str(row.get("category") or UNCATEGORISED), []).append(row)
    return {
        "overall": _block(judged),
        "categories": {name: _block(group) for name, group in names.items()},
        "scale": "0-10",
        "aggregation": AGGREGATION,
        "rubric": RUBRIC,
    }
