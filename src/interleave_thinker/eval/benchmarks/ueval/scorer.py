"""UEval scoring (gemini-2.5-pro judge): one judge question per rubric, text and image rates per item.

The official script asks in one of two ways. *cached* (its default): the item's context is put in a
Gemini context cache with the system instruction, so a question is: system instruction, (the images,)
the context, the rubric prompt. It makes a text cache only when an item has more than one text rubric,
and an image cache only when at least one image was found; otherwise it falls back to *direct*: one
user turn ``context + "\\n\\n" + rubric`` followed by the images, and no system instruction. We send
the same conversations (over any backend; no context cache is needed to send them). A missing output
is still judged, with an empty answer and no images, exactly as the official code does.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.images import open_bounded
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.eval.benchmarks.ueval.prompts import fill
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.judging import JudgeClient, JudgeImage, JudgeMessage, JudgeRequest, Question
from interleave_thinker.eval.outputs import Limits, file_digest, read_image_bytes
from interleave_thinker.eval.prompts import PromptSet
from interleave_thinker.eval.scoring import ItemResult, bind, mean

ATTEMPTS = 500
MODES = ("cached", "direct")
OPEN_TASKS = frozenset({"art", "life", "tech", "exercise"})
CLOSED_TASKS = frozenset({"space", "textbook", "diagram", "paper"})
MAX_RUBRICS = 100
MAX_IMAGES = 32
MAX_ANSWER_CHARS = 200_000
MAX_SUBMISSION_BYTES = 512 * 1024 * 1024
_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0"}


def question_type(task: Any) -> str:
    """``task`` -> open/closed; unknown, empty or missing -> open (only ``task``, as the official code)."""
    name = str(task or "").lower().strip()
    return "closed" if name in CLOSED_TASKS else "open"


# -- reply parsing -------------------------------------------------------------------------------------


_JSON_BLOCK = re.compile(r"```json\s*(\{.*?\})\s*```", re.DOTALL)
_KEYED_OBJECT = re.compile(r'\{\s*"(?:criteria_met|explanation)"[^}]*\}', re.DOTALL)


def parse_response(text: str) -> dict[str, Any]:
    """A ```json block, else an object starting with criteria_met/explanation, else first { to last }."""
    for pattern, group in ((_JSON_BLOCK, 1), (_KEYED_OBJECT, 0)):
        found = pattern.search(text)
        if found:
            with contextlib.suppress(json.JSONDecodeError):
                return _object(json.loads(found.group(group)))
    start, end = text.find("{"), text.rfind("}") + 1
    if start == -1 or end <= start:
        raise ValueError("no JSON object in the reply")
    candidate = text[start:end]
    try:
        return _object(json.loads(candidate))
    except json.JSONDecodeError:
        fixed = re.sub(r'(?<!\\)\\(?!["\\/bfnrtu])', r"\\\\", candidate)
        try:
            return _object(json.loads(fixed))
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON even after escape fixing ({exc.msg})") from None


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("the JSON is not an object")
    return value


def normalize_criteria(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        return True if lowered in _TRUE else False if lowered in _FALSE else value.strip()
    return value


def is_met(value: Any) -> bool:
    """True, or a yes-like string; "not sure", numbers (even 1), None and anything else are not met."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() in _TRUE


def parse_rubric(reply: str) -> dict[str, Any]:
    parsed = parse_response(reply)
    value = normalize_criteria(parsed.get("criteria_met"))
    return {"criteria_met": value, "explanation": parsed.get("explanation", ""), "met": is_met(value)}


# -- the submission ------------------------------------------------------------------------------------


def load_submission(path: Path) -> tuple[dict[str, tuple[str, list[str]]], Path]:
    """``{str(id): (text_answer, image paths)}``; a folder means its ``results.json``."""
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise InputError(
            f"--outputs {path}: no UEval submission JSON there; give the file, or the folder `eval generate` "
            "wrote (it holds results.json)."
        )
    if file.stat().st_size > MAX_SUBMISSION_BYTES:
        raise InputError(f"{file}: larger than {MAX_SUBMISSION_BYTES // 2**20} MiB.")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{file}:{exc.lineno}: not valid JSON ({exc.msg}).") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"{file}: not a UTF-8 JSON file of bounded depth ({type(exc).__name__}).") from None
    if not isinstance(data, list):
        raise InputError(f"{file}: must hold a JSON list of {{id, text_answer, image_answer}}.")
    lookup: dict[str, tuple[str, list[str]]] = {}
    for entry in data:
        if not isinstance(entry, dict) or entry.get("id") is None:
            continue
        images = entry.get("image_answer")
        paths = [v for v in images if v] if isinstance(images, list) else ([images] if images else [])
        text = entry.get("text_answer", "")
        # cleaned once here: a lone surrogate or NUL from the file can be neither hashed nor written
        answer = "" if text is None else clean_text(str(text))
        lookup[clean_text(str(entry["id"]))] = (answer, [clean_text(str(p)) for p in paths])
    return lookup, file.parent


def resolve_image(value: str, submission_dir: Path) -> Path | None:
    """An ``image_answer`` path: relative to the working directory (official), else to the submission's
    folder (ours); None when neither exists. Either way it must lead inside the submission's folder
    (checked when read)."""
    path = Path(value)
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, submission_dir / path]
    return next((c for c in candidates if c.is_file() or c.is_symlink()), None)


def load_images(
    paths: list[str], submission_dir: Path, limits: Limits | None = None
) -> tuple[list[JudgeImage], list[str]]:
    """The images of an answer; a missing one is skipped and listed (as officially), one that is not an
    image, too large or outside the submission's folder fails the item (:class:`InputError`)."""
    images: list[JudgeImage] = []
    problems: list[str] = []
    for value in paths:
        found = resolve_image(value, submission_dir)
        if found is None:
            problems.append(f"image {value} not found (skipped, as the official script does)")
            continue
        images.append(encode_image(read_image_bytes(submission_dir, found, limits or Limits())))
    return images, problems


def output_digest(
    submission: dict[str, tuple[str, list[str]]], submission_dir: Path, limits: Limits, item: EvalItem
) -> str:
    """What a stored score of ``item`` is bound to: its data record, its answer and its images' bytes."""
    if item.id not in submission:
        return bind(item, "missing")
    text, paths = submission[item.id]
    found = [(value, resolve_image(value, submission_dir)) for value in paths]
    files = [f"{v}:{'missing' if p is None else file_digest(submission_dir, p, limits)}" for v, p in found]
    return bind(item, hashlib.sha256(text.encode("utf-8")).hexdigest(), *files)


def encode_image(data: bytes, max_pixels: int = Limits().max_pixels) -> JudgeImage:
    """PNG and JPEG files as they are; anything else re-encoded as PNG (decoded within ``max_pixels``)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return JudgeImage(data, "image/png")
    if data.startswith(b"\xff\xd8\xff"):
        return JudgeImage(data, "image/jpeg")
    buffer = io.BytesIO()
    try:
        open_bounded(data, max_pixels).save(buffer, format="PNG")
    except (ValueError, OSError) as exc:
        raise InputError(f"an image_answer {exc}.") from None
    return JudgeImage(buffer.getvalue(), "image/png")


# -- requests and scoring ------------------------------------------------------------------------------


def _criterion(rubric: Any) -> str:
    return (
        rubric
        if isinstance(rubric, str)
        else str(rubric.get("criterion", ""))
        if isinstance(rubric, dict)
        else ""
    )


def rubrics(item: EvalItem, name: str) -> list[Any]:
    """The rubric list ``name`` of an item (absent or null: none); any other shape fails the item."""
    value = item.raw.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(r, str | dict) for r in value):
        shown = type(value).__name__ if not isinstance(value, list) else "a list holding other values"
        raise InputError(
            f"{item.where}: {name}: must be a list of rubrics (texts or {{criterion}} objects), got {shown}."
        )
    if len(value) > MAX_RUBRICS:
        raise InputError(f"{item.where}: {name}: {len(value)} rubrics, more than {MAX_RUBRICS}.")
    return value


def _request(system: str, context: str, rubric: str, images: list[JudgeImage], cached: bool) -> JudgeRequest:
    if not cached:
        return JudgeRequest.one_turn((context + "\n\n" + rubric, *images))
    turns = [JudgeMessage("system", (system,))]
    if images:
        turns.append(JudgeMessage("user", tuple(images)))
    turns += [JudgeMessage("user", (context,)), JudgeMessage("user", (rubric,))]
    return JudgeRequest(tuple(turns))


def build_questions(
    prompts: PromptSet,
    item: EvalItem,
    text: str,
    images: list[JudgeImage],
    mode: str,
    attempts: int,
    prefix: str = "ueval_",
) -> list[Question]:
    """One question per rubric; ``prefix`` names the prompt set's roles (UEval's, or another rubric
    benchmark's own texts with the same placeholders)."""
    t = {name.removeprefix(prefix): value for name, value in prompts.texts.items()}
    raw = item.raw
    question = str(raw.get("prompt", ""))
    system = t["system_instruction"]
    out: list[Question] = []
    text_rubrics = rubrics(item, "text_rubrics")
    if text_rubrics:
        context = fill(t["text_template"], question, text)
        cached = mode == "cached" and len(text_rubrics) > 1
        for rubric in text_rubrics:
            prompt = fill(t["text_rubric_template"], question, rubric=_criterion(rubric))
            out.append(
                Question(_request(system, context, prompt, [], cached), parse_rubric, attempts, "text")
            )
    image_rubrics = rubrics(item, "image_rubrics")
    if image_rubrics:
        open_task = question_type(raw.get("task")) == "open"
        template = t["image_template_open"] if open_task else t["image_template_closed"]
        context = fill(template, question, text)
        cached = mode == "cached" and bool(images)
        for rubric in image_rubrics:
            prompt = fill(t["image_rubric_template"], question, rubric=_criterion(rubric))
            out.append(
                Question(_request(system, context, prompt, images, cached), parse_rubric, attempts, "image")
            )
    return out


def _rate(results: list[dict[str, Any] | None]) -> dict[str, Any]:
    if not results:
        return {"met": 0, "total": 0, "rate": None}
    if any(r is None for r in results):
        return {"met": None, "total": len(results), "rate": None}
    met = sum(1 for r in results if r is not None and r["met"])
    return {"met": met, "total": len(results), "rate": met / len(results)}


def score_item(
    prompts: PromptSet,
    client: JudgeClient,
    submission: dict[str, tuple[str, list[str]]],
    submission_dir: Path,
    mode: str,
    attempts: int,
    item: EvalItem,
    limits: Limits | None = None,
    prefix: str = "ueval_",
) -> ItemResult:
    missing = item.id not in submission
    text, paths = submission.get(item.id, ("", []))
    if len(text) > MAX_ANSWER_CHARS:
        raise InputError(
            f"{submission_dir}: item {item.id}: text_answer longer than {MAX_ANSWER_CHARS} characters."
        )
    if len(paths) > MAX_IMAGES:
        raise InputError(
            f"{submission_dir}: item {item.id}: image_answer names {len(paths)} images, more than {MAX_IMAGES}."
        )
    images, problems = load_images(paths, submission_dir, limits)
    questions = build_questions(prompts, item, text, images, mode, attempts, prefix)
    judgements = client.ask_all(item.id, questions)
    results = {"text": [], "image": []}  # type: dict[str, list[dict[str, Any] | None]]
    replies: dict[str, list[str]] = {"text": [], "image": []}
    errors = list(problems)
    for number, (q, j) in enumerate(zip(questions, judgements, strict=True), start=1):
        results[q.role].append(j.value)
        replies[q.role].append(j.replies[-1] if j.replies else "")
        errors += [f"{q.role} rubric {number}: {e}" for e in j.errors]
    text_score, image_score = _rate(results["text"]), _rate(results["image"])
    failed = any(j.value is None for j in judgements)
    status = "failed" if failed else "missing" if missing else "ok"
    rates = [r for r in (text_score["rate"], image_score["rate"]) if r is not None]
    extra = {
        "question_type": question_type(item.raw.get("task")),
        "criteria": {k: [None if r is None else r["criteria_met"] for r in v] for k, v in results.items()},
        "images_judged": len(images),
    }
    dims = {"text_score": text_score, "image_score": image_score}
    return ItemResult(item.id, item.category, mean(rates), status, dims, replies, errors, extra)


AVERAGE_FORMULA = (
    "per task: 100 x the mean of its text_avg_rate and image_avg_rate (the rates it has); "
    "average: the unweighted mean of the task scores (as UEval's leaderboard 'Avg' is the mean of its "
    "8 task columns)"
)


def task_score(text_rate: float | None, image_rate: float | None) -> float | None:
    """A task's score in the leaderboard's unit (0-100): the mean of the rates it has, times 100."""
    rates = [r for r in (text_rate, image_rate) if r is not None]
    return 100 * sum(rates) / len(rates) if rates else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The official averages of item rates (missing outputs included, as judged), plus per task and the
    single average the published numbers use (ours: :data:`AVERAGE_FORMULA`)."""

    def rates(subset: list[dict[str, Any]], kind: str) -> list[float]:
        # an item that failed before its judgements (a refused image, bad rubrics) has no rates at all
        found = [(r.get(kind) or {}).get("rate") for r in subset]
        return [rate for rate in found if rate is not None]

    tasks: dict[str, Any] = {}
    for task in sorted({str(r["category"]) for r in rows}):
        subset = [r for r in rows if str(r["category"]) == task]
        text, image = mean(rates(subset, "text_score")), mean(rates(subset, "image_score"))
        tasks[task] = {
            "text_avg_rate": text,
            "image_avg_rate": image,
            "score": task_score(text, image),
            "n": len(subset),
        }
    return {
        "text_avg_rate": mean(rates(rows, "text_score")),
        "image_avg_rate": mean(rates(rows, "image_score")),
        "average": mean(entry["score"] for entry in tasks.values()),
        "average_formula": AVERAGE_FORMULA,
        "num_items": len(rows),
        "num_items_with_text": len(rates(rows, "text_score")),
        "num_items_with_image": len(rates(rows, "image_score")),
        "tasks": tasks,
        "combined_note": "the official code computes no combined score; the item 'score' is our mean of its "
        "two rates; 'average' follows the leaderboard (see average_formula)",
    }
