"""RISEBench scoring (gpt-4.1-2025-04-14 judge): up to three judges per sample, score and accuracy.

Faithful to ``eval_vanilla``/``extract``/``calculate_score``/``calculate_completion`` at the pinned
commit, including its quirks (the consistency judge of reference-image samples sees the reference,
``x in item`` tests whether the *column* exists, a NaN ``consistency_free`` is truthy in the score).
``--scorer-version pre-2026-04-13`` applies the accuracy rule before the fix of that day, under which a
consistency-free sample could never be accurate. Every image is sent as the official 768-px JPEG
thumbnail (RGBA/P converted to RGB, Pillow's default quality) with ``detail: high``.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.judging import JudgeClient, JudgeImage, JudgeRequest, Part, Question
from interleave_thinker.eval.outputs import Limits, file_digest, open_image, reason
from interleave_thinker.eval.prompts import PromptSet
from interleave_thinker.eval.scoring import ItemResult, bind, mean

SCORER_VERSIONS = ("current", "pre-2026-04-13")
SETTINGS = {"max_tokens": 4096, "n": 1, "temperature": 0}
IMAGE_SIZE = 768
CATEGORIES = ("temporal_reasoning", "causal_reasoning", "spatial_reasoning", "logical_reasoning")
SHORT = {"temporal_reasoning": "Temporal", "causal_reasoning": "Causal", "spatial_reasoning": "Spatial"}
SHORT["logical_reasoning"] = "Logical"
_FINAL = re.compile(r"\*?\*?Final Score\*?\*?:?\s*([\d*\s,\n]*)", re.IGNORECASE)
_FINALS = re.compile(r"\*?\*?Final Scores\*?\*?:?\s*([\d*\s,\n]*)", re.IGNORECASE)


def extract(answer: str) -> list[int] | None:
    """The numbers of the first ``Final Score`` match that has any; else of ``Final Scores``; else None."""
    for match in _FINAL.findall(answer):
        numbers = re.findall(r"\d+", match.replace("\n", " "))
        if numbers:
            return [int(n) for n in numbers]
    matches = _FINALS.findall(answer)
    if not matches:
        return None
    for match in matches:
        numbers = re.findall(r"\d+", match.replace("\n", " "))
        if numbers:
            return [int(n) for n in numbers]
    return []


def parse_judge(reply: str) -> list[int]:
    numbers = extract(reply)
    if not numbers:
        raise ValueError("no 'Final Score' with a number")
    return numbers


def encode_image(path: Path, folder: Path | None = None, limits: Limits | None = None) -> JudgeImage:
    """The official encoding: RGBA/P -> RGB, thumbnail to 768x768, JPEG with Pillow's defaults; the file
    read inside ``folder`` (default: its own) within ``limits`` (bytes, pixels) before any decoding."""
    opened = open_image(folder or path.parent, path, limits or Limits())
    image = opened.convert("RGB") if opened.mode in ("RGBA", "P") else opened
    image.thumbnail((IMAGE_SIZE, IMAGE_SIZE))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    return JudgeImage(buffer.getvalue(), "image/jpeg", "high")


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def find_output(outputs: Path, item: EvalItem) -> Path | None:
    for suffix in ("png", "jpg", "jpeg"):
        path = outputs / "images" / item.category / f"{item.id}.{suffix}"
        if path.is_file() or path.is_symlink():
            return path
    return None


def output_digest(outputs: Path, limits: Limits, item: EvalItem) -> str:
    """What a stored score of ``item`` is bound to: its data record and its output file."""
    found = find_output(outputs, item)
    return bind(item, "missing" if found is None else f"{found.name}:{file_digest(outputs, found, limits)}")


def plan_judges(item: EvalItem, columns: set[str], prompts: PromptSet) -> list[tuple[str, str, list[Path]]]:
    """(role, prompt, input images before the output image) per judge, as ``eval_vanilla`` chooses them."""
    raw, t = item.raw, prompts.texts
    instruct = raw.get("instruction")
    img1 = item.path("image")
    if item.category in ("temporal_reasoning", "causal_reasoning"):
        reference = raw.get("reference")
        with_input = not _nan(raw.get("reasoning_img"))
        key = "rise_prompt_reasoning_w_input" if with_input else "rise_prompt_reasoning"
        rea = t[key].format(instruct=instruct, reference=reference)
        cons, qua = t["rise_prompt_consist"].format(instruct=instruct), t["rise_prompt_generation"]
    elif item.category == "spatial_reasoning":
        with_input = True
        if "reference_img" in columns and not _nan(raw.get("reference_img")):
            img1 = item.path("reference_img")
            rea = t["rise_prompt_spatial_ref_img"].format(instruct=instruct)
        elif not _nan(raw.get("reasoning_img")):
            rea = t["rise_prompt_spatial_ref_w_input"].format(
                instruct=instruct, reference=raw.get("reference")
            )
        else:
            with_input = False
            rea = t["rise_prompt_spatial_ref"].format(instruct=instruct, reference=raw.get("reference"))
        cons, qua = t["rise_prompt_spatial_cons"].format(instruct=instruct), t["rise_prompt_spatial_qual"]
    elif item.category == "logical_reasoning":
        with_input, qua = False, None
        if "reference_txt" in columns and not _nan(raw.get("reference_txt")):
            reference = raw.get("reference_txt")
            cons = t["rise_prompt_logical_cons_ans"].format(instruct=instruct, reference=reference)
            rea = t["rise_prompt_logical_txt"].format(instruct=instruct, reference=reference)
        elif "reference_img" in columns and not _nan(raw.get("reference_img")):
            with_input, img1 = True, item.path("reference_img")
            cons = t["rise_prompt_logical_cons"].format(instruct=instruct)
            wo_q = "reasoning_wo_ins" in columns
            rea = (
                t["rise_prompt_logical_img_wo_q"]
                if wo_q
                else t["rise_prompt_logical_img"].format(instruct=instruct)
            )
        else:
            raise InputError(
                f"{item.where}: a logical_reasoning sample needs reference_txt or reference_img."
            )
    else:
        raise InputError(f"{item.where}: unknown RISEBench category {item.category!r}.")
    if img1 is None:
        raise InputError(f"{item.where}: image: missing.")
    judges: list[tuple[str, str, list[Path]]] = []
    if not consistency_free(raw, columns):
        judges.append(("consistency", cons, [img1]))
    judges.append(("reasoning", rea, [img1] if with_input else []))
    if qua is not None:
        judges.append(("quality", qua, []))
    return judges


def consistency_free(raw: dict[str, Any], columns: set[str]) -> bool:
    return "consistency_free" in columns and not _nan(raw.get("consistency_free"))


def score_item(
    prompts: PromptSet,
    client: JudgeClient,
    outputs: Path,
    columns: set[str],
    version: str,
    item: EvalItem,
    limits: Limits | None = None,
) -> ItemResult:
    extra = {"subtask": item.raw.get("subtask")} if "subtask" in columns else {}
    judges = plan_judges(item, columns, prompts)
    output = find_output(outputs, item)
    if output is None:
        errors = [f"no images/{item.category}/{item.id}.png|jpg|jpeg"]
        return ItemResult(
            item.id, item.category, None, "missing", {"accuracy": 0}, extra=extra, errors=errors
        )
    encoded: dict[Path, JudgeImage] = {}

    def image(path: Path) -> JudgeImage:
        # the output stays inside --outputs; an input inside the data's folder
        folder = outputs if path == output else Path(item.root) if item.root else path.parent
        if path not in encoded:
            encoded[path] = encode_image(path, folder, limits)
        return encoded[path]

    try:
        messages: list[tuple[str, tuple[Part, ...]]] = [
            (role, (text, *[image(p) for p in [*inputs, output]])) for role, text, inputs in judges
        ]
    except (OSError, InputError) as exc:  # a missing, refused or unreadable image: the sample fails alone
        errors = [f"cannot read an image of this sample: {reason(exc)}"]
        return ItemResult(item.id, item.category, None, "failed", {"accuracy": 0}, extra=extra, errors=errors)
    questions = [
        Question(JudgeRequest.one_turn(parts, SETTINGS), parse_judge, 1, role) for role, parts in messages
    ]
    judgements = client.ask_all(item.id, questions)
    replies = {q.role: j.replies for q, j in zip(questions, judgements, strict=True)}
    errors = [f"{q.role}: {e}" for q, j in zip(questions, judgements, strict=True) for e in j.errors]
    values = {q.role: j.value for q, j in zip(questions, judgements, strict=True)}
    dims = dimensions(item.category, values)
    if dims is None:
        errors.append("a judgement gave no usable Final Score")
        return ItemResult(item.id, item.category, None, "failed", {"accuracy": 0}, replies, errors, extra)
    score = calculate_score(item.category, dims, item.raw, columns)
    dims["accuracy"] = accurate(item.category, dims, item.raw, columns, version)
    return ItemResult(item.id, item.category, score, "ok", dims, replies, errors, extra)


def dimensions(category: str, values: dict[str, list[int] | None]) -> dict[str, Any] | None:
    """The official list bookkeeping: consistency-free ``[None]+s2+s3``, logical ``s1+s2``, else all three."""
    if any(v is None for v in values.values()):
        return None
    numbers: list[int | None] = [None] if "consistency" not in values else []
    for role in ("consistency", "reasoning", "quality"):
        numbers.extend(values.get(role) or [])
    if category == "logical_reasoning" and len(numbers) == 2 and None not in numbers:
        first, second = (int(n or 0) for n in numbers)
        return {
            "ApprConsistency": 4 * min(first, 1) + 1,
            "Reasoning": 4 * min(second, 1) + 1,
            "VisualPlausibility": None,
        }
    if category != "logical_reasoning" and len(numbers) == 3:
        return dict(zip(("ApprConsistency", "Reasoning", "VisualPlausibility"), numbers, strict=True))
    return None


def _v(value: Any) -> float:
    return math.nan if value is None else float(value)


def calculate_score(category: str, d: dict[str, Any], raw: dict[str, Any], columns: set[str]) -> float | None:
    """The official formula; a missing ``consistency_free`` is NaN, which pandas treats as true."""
    ac, r, vp = _v(d["ApprConsistency"]), _v(d["Reasoning"]), _v(d["VisualPlausibility"])
    if category == "logical_reasoning":
        score = 0.3 * ac + 0.7 * r
    elif "consistency_free" in columns and (
        _nan(raw.get("consistency_free")) or bool(raw["consistency_free"])
    ):
        score = 0.2 * vp + 0.8 * r
    else:
        score = 0.3 * ac + 0.5 * r + 0.2 * vp
    if r == 1:
        score = max(score * 0.5, 1)
    return None if math.isnan(score) else score


def accurate(category: str, d: dict[str, Any], raw: dict[str, Any], columns: set[str], version: str) -> int:
    ac, r, vp = d["ApprConsistency"], d["Reasoning"], d["VisualPlausibility"]
    if category == "logical_reasoning":
        return int(ac == 5 and r == 5)
    if version == "current" and consistency_free(raw, columns):
        return int(r == 5 and vp == 5)
    return int(ac == 5 and r == 5 and vp == 5)


def _row(rows: list[dict[str, Any]], key: str = "score") -> list[Any]:
    return [r.get(key) for r in rows]


def _entry(rows: list[dict[str, Any]]) -> dict[str, Any]:
    score = mean(_row(rows))
    return {
        "score": score,
        "score_percentage": None if score is None else 25 * (score - 1),
        "accuracy": mean([r.get("accuracy", 0) or 0 for r in rows]) if rows else None,
        "n": len(rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Overall, per category, per dimension and per subtask; means over samples, failures NaN in scores
    and 0 in accuracy (so categories weigh by their sample counts)."""

    def pick(category: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["category"] == category]

    result: dict[str, Any] = {"overall": _entry(rows), "categories": {}, "dimensions": {}, "subtasks": {}}
    for category in CATEGORIES:
        subset = pick(category)
        if subset:
            result["categories"][SHORT[category]] = _entry(subset)
    dims = result["dimensions"]
    dims["Overall_Reasoning"] = mean(_row(rows, "Reasoning"))
    dims["Overall_ApprConsistency"] = mean(_row(rows, "ApprConsistency"))
    dims["Overall_VisualPlausibility_total"] = mean(_row(rows, "VisualPlausibility"))
    for category in CATEGORIES:
        subset, short = pick(category), SHORT[category]
        if not subset:
            continue
        dims[f"{short}_Reasoning"] = mean(_row(subset, "Reasoning"))
        dims[f"{short}_Consistency"] = mean(_row(subset, "ApprConsistency"))
        if category != "logical_reasoning":
            dims[f"{short}_Quality"] = mean(_row(subset, "VisualPlausibility"))
    for subtask in sorted({str(r["subtask"]) for r in rows if r.get("subtask") is not None}):
        result["subtasks"][subtask] = _entry([r for r in rows if str(r.get("subtask")) == subtask])
    return result
