"""Loaders with validation for the release's training-data formats.

Every loader reads the whole file, collects *every* problem (``FILE:LINE: field: problem``) and
raises one :class:`~interleave_thinker.train.data.issues.DatasetError` listing them, or returns typed
examples. Aliases seen in the wild are accepted: ``evaluation`` / ``ground_truth``,
``previous_prompt`` / ``rewritten_prompt``, ``images`` as a list or one string, ``image``,
LLaMA-Factory's ``conversations`` with ``from`` / ``value``, and for ``planner_rl`` (the format of
FastVideo's InterleaveThinker branch) its fields in its priority (:mod:`.planner_rl`). Relative image paths are resolved
against ``image_dir`` (default: the file's folder) and may not leave it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from interleave_thinker.agents.critic import parse_verdict
from interleave_thinker.agents.messages import count_image_markers
from interleave_thinker.agents.planner import parse_plan
from interleave_thinker.core.errors import InputError, ParseError
from interleave_thinker.core.types import PlanStep
from interleave_thinker.train.data.examples import (
    ChatTurn,
    CriticRLExample,
    GroundTruth,
    Kind,
    PlannerRLExample,
    RecordEntry,
    SFTExample,
    TrajectoryRecord,
)
from interleave_thinker.train.data.issues import DatasetError, Issue, LineIndex, PathPart
from interleave_thinker.train.data.planner_rl import parse_planner_rl
from interleave_thinker.train.data.record_reader import RecordReader

T = TypeVar("T")
ROLE_ALIASES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "system": "system",
}


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise InputError(f"{path}: no such file.")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read as UTF-8 text ({exc}).") from None


def _decode_error(label: str, exc: json.JSONDecodeError, line_base: int = 0) -> DatasetError:
    return DatasetError(
        [Issue(label, line_base + exc.lineno, "(json)", f"invalid JSON: {exc.msg} (column {exc.colno})")]
    )


def _array_records(path: Path, image_dir: Path | None) -> list[tuple[Any, RecordReader]]:
    """A JSON file holding a list of records (or one record): each record with its reader."""
    from interleave_thinker.train.data.issues import element_offsets

    text = _read_text(path)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _decode_error(str(path), exc) from None
    folder = image_dir or path.parent
    if isinstance(value, dict):
        start = len(text) - len(text.lstrip())
        return [(value, RecordReader(str(path), text, start, 1, folder))]
    if not isinstance(value, list):
        raise DatasetError(
            [Issue(str(path), 1, "(file)", f"must hold a JSON list of records, got {type(value).__name__}")]
        )
    offsets = element_offsets(text)
    lines = LineIndex(text)  # one for the file: each problem's line is a lookup, not a count from the start
    return [
        (item, RecordReader(str(path), text, off, 1, folder, lines))
        for item, off in zip(value, offsets, strict=True)
    ]


def _jsonl_records(path: Path, image_dir: Path | None) -> list[tuple[Any, RecordReader]]:
    text = _read_text(path)
    folder = image_dir or path.parent
    rows: list[tuple[Any, RecordReader]] = []
    issues: list[Issue] = []
    for number, line in enumerate(text.split("\n"), start=1):  # JSON strings may hold U+2028, U+0085
        if not line.strip():
            continue
        try:
            rows.append(
                (
                    json.loads(line),
                    RecordReader(str(path), line, len(line) - len(line.lstrip()), number, folder),
                )
            )
        except json.JSONDecodeError as exc:
            issues.extend(_decode_error(str(path), exc, number - 1).issues)
    if issues:
        raise DatasetError(issues)
    return rows


def _collect(rows: list[tuple[Any, RecordReader]], parse: Callable[[Any, RecordReader], T | None]) -> list[T]:
    results: list[T] = []
    issues: list[Issue] = []
    for value, reader in rows:
        if not isinstance(value, dict):
            reader.issue((), f"must be a JSON object, got {type(value).__name__}")
            parsed = None
        else:
            parsed = parse(value, reader)
        issues.extend(reader.issues)
        if parsed is not None and not reader.issues:
            results.append(parsed)
    if issues:
        raise DatasetError(issues)
    return results


def _parse_sft(
    obj: dict[str, Any], r: RecordReader, check: Callable[[str], object] | None
) -> SFTExample | None:
    key = "messages" if "messages" in obj or "conversations" not in obj else "conversations"
    messages, where = r.get(obj, (), key)
    if messages is None:
        return None
    if not isinstance(messages, list) or not messages:
        r.issue(where, "must be a non-empty list of turns")
        return None
    turns: list[ChatTurn] = []
    for i, turn in enumerate(messages):
        at = (key, i)
        if not isinstance(turn, dict):
            r.issue(at, f"must be an object with role and content, got {type(turn).__name__}")
            continue
        role_value, role_at = r.get(turn, at, "role", "from")
        content = r.string(turn, at, "content", "value")
        role = ROLE_ALIASES.get(role_value) if isinstance(role_value, str) else None
        if role_value is not None and role is None:
            r.issue(role_at, f"unknown role {role_value!r}; use user, assistant or system")
        if role is not None and content is not None:
            turns.append(ChatTurn(role=role, content=content))  # type: ignore[arg-type]
    images = r.images(obj, ())
    if r.issues or images is None:
        return None
    if not any(t.role == "assistant" for t in turns):
        r.issue((key,), "has no assistant turn to learn from")
        return None
    markers = sum(count_image_markers(t.content) for t in turns)
    if markers != len(images):
        r.issue(
            ("images",),
            f"{len(images)} image(s) but {markers} <image> marker(s) in the messages; give one image per marker",
        )
        return None
    if check is not None:
        last = max(i for i, t in enumerate(turns) if t.role == "assistant")
        try:
            check(turns[last].content)
        except ParseError as exc:
            r.issue((key, last, "content"), f"the reply does not parse ({exc})")
            return None
    return SFTExample(messages=tuple(turns), images=tuple(images))


def _parse_ground_truth(obj: dict[str, Any], r: RecordReader) -> GroundTruth | None:
    truth, where = r.get(obj, (), "ground_truth", "evaluation")
    if truth is None:
        return None
    if isinstance(truth, str):
        with contextlib.suppress(json.JSONDecodeError):
            truth = json.loads(truth)
    if not isinstance(truth, dict):
        r.issue(where, "must be an object with success, semantics and quality")
        return None
    success_value, at = r.get(truth, where, "success")
    success = None if success_value is None else r.boolean(success_value, at)
    scores = []
    for name in ("semantics", "quality"):
        value, at = r.get(truth, where, name)
        scores.append(None if value is None else r.score(value, at))
    if success is None or scores[0] is None or scores[1] is None:
        return None
    return GroundTruth(success=success, semantics=scores[0], quality=scores[1])


def _parse_rl(obj: dict[str, Any], r: RecordReader) -> CriticRLExample | None:
    problem = r.string(obj, (), "problem", "prompt", empty=False)
    origin_prompt = r.string(obj, (), "origin_prompt", empty=False)
    previous = r.string(obj, (), "previous_prompt", "rewritten_prompt")
    truth = _parse_ground_truth(obj, r)
    images = r.images(obj, ())
    if None in (problem, origin_prompt, previous, truth) or images is None:
        return None
    assert problem is not None and origin_prompt is not None and previous is not None and truth is not None
    if count_image_markers(problem) != len(images):
        r.issue(
            ("images",),
            f"{len(images)} image(s) but {count_image_markers(problem)} <image> marker(s) in problem",
        )
        return None
    origin = r.image(obj["origin_image_path"], ("origin_image_path",)) if "origin_image_path" in obj else None
    edited = (
        r.image(obj["edited_image_path"], ("edited_image_path",)) if obj.get("edited_image_path") else None
    )
    origin = origin or (images[0] if images else None)
    edited = edited or (images[1] if len(images) > 1 else None)
    if origin is None:
        if not r.issues:
            r.issue(("origin_image_path",), "missing, and images has no first image to use instead")
        return None
    return CriticRLExample(problem, tuple(images), origin_prompt, origin, edited, previous, truth)


def _parse_plan_steps(value: Any, r: RecordReader, where: tuple[PathPart, ...]) -> list[PlanStep] | None:
    if not isinstance(value, list) or not value:
        r.issue(where, "must be a non-empty list of plan steps")
        return None
    try:
        return parse_plan("<answer>" + json.dumps({"execution_plan": value}) + "</answer>").steps
    except ParseError as exc:
        r.issue(where, f"not a valid plan ({exc})")
        return None


def _parse_entry(entry: Any, r: RecordReader, at: tuple[PathPart, ...]) -> RecordEntry | None:
    if not isinstance(entry, dict):
        r.issue(at, f"must be an object, got {type(entry).__name__}")
        return None
    step_value, step_at = r.get(entry, at, "step", "step_number")
    if step_value is not None and (isinstance(step_value, bool) or not isinstance(step_value, int)):
        r.issue(step_at, f"must be an integer, got {step_value!r}")
    prompt = r.string(entry, at, "prompt")
    refine = entry.get("refine_prompt", entry.get("rewritten_prompt")) or ""
    if not isinstance(refine, str):
        r.issue((*at, "refine_prompt"), f"must be a string, got {type(refine).__name__}")
    if "images" in entry and "source_img" not in entry:
        pair = r.images(entry, at) or []
        source, target = ([*pair, None, None])[:2]
        if len(pair) != 2 and not r.issues:
            r.issue((*at, "images"), f"must hold [source, target], got {len(pair)} image(s)")
    else:
        src, src_at = r.get(entry, at, "source_img")
        tgt, tgt_at = r.get(entry, at, "target_img")
        source = None if src is None else r.image(src, src_at)
        target = None if tgt is None else r.image(tgt, tgt_at)
    success_value, success_at = r.get(entry, at, "success", "previous_step_success")
    success = None if success_value is None else r.boolean(success_value, success_at)
    scores: dict[str, float | None] = {"semantics": None, "quality": None}
    nested = entry.get("evaluation", entry.get("ground_truth"))
    holder, holder_at = (
        (nested, (*at, "evaluation" if "evaluation" in entry else "ground_truth"))
        if isinstance(nested, dict)
        else (entry, at)
    )
    for name in scores:
        if holder.get(name) is not None:
            scores[name] = r.score(holder[name], (*holder_at, name))
    reasoning = entry.get("reasoning")
    if prompt is None or source is None or target is None or success is None or not isinstance(refine, str):
        return None
    return RecordEntry(
        step=int(step_value),
        prompt=prompt,
        refine_prompt=refine,
        source_img=source,
        target_img=target,
        success=success,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        **scores,
    )


def _parse_record(obj: dict[str, Any], r: RecordReader) -> TrajectoryRecord | None:
    user_input = r.string(obj, (), "user_input", empty=False)
    context, context_at = r.get(obj, (), "global_context")
    plan: list[PlanStep] | None = None
    reasoning = None
    if isinstance(context, dict):
        value, where = r.get(context, context_at, "execution_plan")
        plan = None if value is None else _parse_plan_steps(value, r, where)
        reasoning = context.get("reasoning") if isinstance(context.get("reasoning"), str) else None
    elif context is not None:
        r.issue(context_at, "must be an object with reasoning and execution_plan")
    steps_value, steps_at = r.get(obj, (), "steps")
    entries: list[RecordEntry] = []
    if steps_value is not None and not isinstance(steps_value, list):
        r.issue(steps_at, "must be a list of critic calls")
    elif steps_value is not None:
        for i, entry in enumerate(steps_value):
            parsed = _parse_entry(entry, r, (*steps_at, i))
            if parsed is not None:
                entries.append(parsed)
    inputs = r.images(obj, ())
    if r.issues or user_input is None or plan is None or inputs is None:
        return None
    return TrajectoryRecord(user_input, reasoning, tuple(plan), tuple(entries), tuple(inputs))


def load_sft(path: Path, *, image_dir: Path | None = None, role: str | None = None) -> list[SFTExample]:
    """ShareGPT-style JSON (a list) or JSONL; with ``role`` the assistant replies must parse as a plan/verdict."""
    check = {"planner": parse_plan, "critic": parse_verdict}.get(role or "")
    rows = _jsonl_records(path, image_dir) if path.suffix == ".jsonl" else _array_records(path, image_dir)
    return _collect(rows, lambda obj, r: _parse_sft(obj, r, check))


def load_critic_rl(path: Path, *, image_dir: Path | None = None) -> list[CriticRLExample]:
    """EasyR1-style ``critic_rl.jsonl`` (a JSON list is accepted too)."""
    rows = _array_records(path, image_dir) if path.suffix == ".json" else _jsonl_records(path, image_dir)
    return _collect(rows, _parse_rl)


def load_planner_rl(path: Path, *, image_dir: Path | None = None) -> list[PlannerRLExample]:
    """``planner_rl.jsonl`` (a JSON list is accepted too): planner GRPO requests, with images for guidance."""
    rows = _array_records(path, image_dir) if path.suffix == ".json" else _jsonl_records(path, image_dir)
    return _collect(rows, parse_planner_rl)


def load_record(path: Path, *, image_dir: Path | None = None) -> TrajectoryRecord:
    """One ``execution_record.json``."""
    rows = _array_records(path, image_dir)
    if len(rows) != 1 or not isinstance(rows[0][0], dict):
        raise DatasetError([Issue(str(path), 1, "(file)", "must hold one trajectory record (a JSON object)")])
    return _collect(rows, _parse_record)[0]


def load_kind(path: Path, kind: Kind, *, image_dir: Path | None = None) -> list[Any]:
    """Load any kind; a record file gives a one-element list."""
    if kind == "planner_sft":
        return list(load_sft(path, image_dir=image_dir, role="planner"))
    if kind == "planner_rl":
        return list(load_planner_rl(path, image_dir=image_dir))
    if kind == "critic_sft":
        return list(load_sft(path, image_dir=image_dir, role="critic"))
    if kind == "critic_rl":
        return list(load_critic_rl(path, image_dir=image_dir))
    return [load_record(path, image_dir=image_dir)]
