"""WISE scoring: WISE_Verified (``wise``, binary, Qwen3.5-35B-A3B) and the original WiScore (``wise-legacy``).

Both send the raw bytes of ``{prompt_id}.png`` labelled PNG after the filled user text, with the
official system text, and retry up to 3 times on an unparsable reply. They differ in the judge, the
request settings, the reply regex, the per-image score, the category id ranges and the weights; the
same prompt id means another category under each, so data of one protocol is refused by the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.agents.reply_formats import Choice, scores
from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.benchmarks.wise.prompts import LEGACY_PROMPTS, VERIFIED_PROMPTS, fill
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.judge_formats import register_system_format
from interleave_thinker.eval.judging import JudgeClient, JudgeImage, JudgeRequest, Question
from interleave_thinker.eval.outputs import Limits, file_digest, read_image_bytes
from interleave_thinker.eval.prompts import PromptSet
from interleave_thinker.eval.scoring import ItemResult, bind, mean

ATTEMPTS = 3
CATEGORY_OF_LABEL = {
    "cultural knowledge": "CULTURE",
    "time": "TIME",
    "space": "SPACE",
    "biology": "BIOLOGY",
    "physical knowledge": "PHYSICS",
    "chemistry": "CHEMISTRY",
}


@dataclass(frozen=True)
class WiseProtocol:
    name: str
    data_kind: str
    system: str
    user: str
    ranges: tuple[tuple[str, int, int], ...]
    weights: dict[str, float]
    settings: dict[str, Any]


CATEGORIES = ("CULTURE", "TIME", "SPACE", "BIOLOGY", "PHYSICS", "CHEMISTRY")


def _protocol(
    name: str, kind: str, last_ids: tuple[int, ...], weights: tuple[float, ...], settings: dict[str, Any]
) -> WiseProtocol:
    """A protocol from the last prompt id and the weight of each of :data:`CATEGORIES`, in that order
    (a category's ids run from the one after the previous category's last id)."""
    firsts = (1, *(last + 1 for last in last_ids[:-1]))
    ranges = tuple(zip(CATEGORIES, firsts, last_ids, strict=True))
    system, user = f"wise_{kind}_system", f"wise_{kind}_user"
    return WiseProtocol(
        name, kind, system, user, ranges, dict(zip(CATEGORIES, weights, strict=True)), settings
    )


VERIFIED = _protocol(
    "wise",
    "verified",
    (400, 520, 640, 760, 880, 1000),
    (0.4, 0.12, 0.12, 0.12, 0.12, 0.12),
    {"temperature": 0.0, "max_tokens": 500, "chat_template_kwargs": {"enable_thinking": False}},
)
LEGACY = _protocol(
    "wise-legacy",
    "legacy",
    (400, 567, 700, 800, 900, 1000),
    (0.4, 0.167, 0.133, 0.1, 0.1, 0.1),
    {"temperature": 0.0, "max_tokens": 2000},
)


def category_of(protocol: WiseProtocol, prompt_id: int) -> str | None:
    for name, low, high in protocol.ranges:
        if low <= prompt_id <= high:
            return name
    return None


# -- reply parsing (the official regexes) ------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
_THINK_END = re.compile(r"</think>\s*")
_VERIFIED_SCORE = re.compile(r"\*{0,2}Score\*{0,2}\s*[::]?\s*([01])\b", re.IGNORECASE)
_VERIFIED_LINE = re.compile(r"(?m)^\s*([01])\s*$")
_LEGACY_SCORE = re.compile(
    r"\*{0,2}(Consistency|Realism|Aesthetic Quality)\*{0,2}\s*[::]?\s*(\d)", re.IGNORECASE
)
_LEGACY_LINE = re.compile(r"(?m)^\s*([0-2])\s*$")
LEGACY_KEYS = ("consistency", "realism", "aesthetic_quality")


def clean_verified(content: str) -> str:
    """WISE_Verified's cleanup of a reply: drop think blocks, then stray closing tags, then strip."""
    return _THINK_END.sub("", _THINK.sub("", content)).strip()


def parse_verified(reply: str) -> float:
    """``Score: 0|1`` (first match), else exactly one bare ``0``/``1`` line; ValueError otherwise."""
    text = clean_verified(reply)
    match = _VERIFIED_SCORE.search(text)
    if match:
        return float(match.group(1))
    lines = _VERIFIED_LINE.findall(text)
    if len(lines) == 1:
        return float(lines[0])
    raise ValueError("no 'Score: 0|1' and not exactly one bare 0/1 line")


def parse_legacy(reply: str) -> dict[str, float]:
    """The three named scores (later ones win), else the first three bare 0-2 lines; all three needed."""
    found = {name.lower().replace(" ", "_"): float(v) for name, v in _LEGACY_SCORE.findall(reply)}
    if not found:
        lines = _LEGACY_LINE.findall(reply)
        if len(lines) >= 3:
            found = dict(zip(LEGACY_KEYS, map(float, lines[:3]), strict=False))
    missing = [k for k in LEGACY_KEYS if k not in found]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    return found


def wiscore(scores: dict[str, float]) -> float:
    return (0.7 * scores["consistency"] + 0.2 * scores["realism"] + 0.1 * scores["aesthetic_quality"]) / 2


# -- protocol checks, requests, scoring ---------------------------------------------------------------


def check_data(protocol: WiseProtocol, items: list[EvalItem]) -> None:
    """Refuse data of the other protocol: the loader's verdict, then every id's category vs its label."""
    other = LEGACY if protocol is VERIFIED else VERIFIED
    kinds = {item.protocol for item in items if item.protocol}
    if kinds and kinds != {protocol.data_kind}:
        raise InputError(
            f"The data is WISE {'/'.join(sorted(k for k in kinds if k))} prompts but `eval score {protocol.name}` "
            f"scores {protocol.data_kind} data; use `eval score {other.name}` or the other prompt files."
        )
    for item in items:
        label = CATEGORY_OF_LABEL.get(str(item.raw.get("Category", "")).strip().lower())
        expected = category_of(protocol, int(item.id))
        if expected is None:
            raise InputError(f"{item.where}: prompt_id {item.id} is outside 1-1000.")
        if label is not None and label != expected:
            raise InputError(
                f"{item.where}: prompt_id {item.id} is {label} in the data but {expected} under the "
                f"{protocol.name} id ranges: this is {other.data_kind} data; use `eval score {other.name}`."
            )


def build_request(
    protocol: WiseProtocol, prompts: PromptSet, raw: dict[str, Any], image: bytes
) -> JudgeRequest:
    user = fill(prompts.texts[protocol.user], raw.get("Prompt"), raw.get("Explanation"))
    parts = (user, JudgeImage(image, "image/png"))
    return JudgeRequest.one_turn(parts, protocol.settings, system=prompts.texts[protocol.system])


def output_path(outputs: Path, prompt_id: str) -> Path:
    return outputs / f"{prompt_id}.png"


def output_digest(outputs: Path, limits: Limits, item: EvalItem) -> str:
    """What a stored score of ``item`` is bound to: its data record and its output file."""
    return bind(item, file_digest(outputs, output_path(outputs, item.id), limits))


def read_image(outputs: Path, prompt_id: str, limits: Limits | None = None) -> bytes | None:
    """The output's bytes exactly as found (the official scorer sends them as they are), after the
    checks of :func:`~interleave_thinker.eval.outputs.read_image_bytes`; None when there is none."""
    path = output_path(outputs, prompt_id)
    if not path.exists() and not path.is_symlink():
        return None
    return read_image_bytes(outputs, path, limits or Limits())


def score_item(
    protocol: WiseProtocol,
    prompts: PromptSet,
    client: JudgeClient,
    outputs: Path,
    item: EvalItem,
    attempts: int,
    limits: Limits | None = None,
) -> ItemResult:
    category = category_of(protocol, int(item.id)) or ""
    extra = {"subcategory": item.raw.get("Subcategory")}
    image = read_image(outputs, item.id, limits)
    if image is None:
        return ItemResult(item.id, category, None, "missing", extra=extra, errors=[f"no {item.id}.png"])
    parse = parse_verified if protocol is VERIFIED else parse_legacy
    question = Question(build_request(protocol, prompts, item.raw, image), parse, attempts, "judge")
    judgement = client.ask_all(item.id, [question])[0]
    replies = {"judge": judgement.replies}
    if not judgement.ok:
        return ItemResult(
            item.id, category, None, "failed", replies=replies, errors=judgement.errors, extra=extra
        )
    if protocol is VERIFIED:
        return ItemResult(item.id, category, judgement.value, "ok", replies=replies, extra=extra)
    dims = dict(judgement.value)
    return ItemResult(item.id, category, wiscore(dims), "ok", dims, replies, judgement.errors, extra)


def summarize(protocol: WiseProtocol, rows: list[dict[str, Any]], *, sliced: bool = False) -> dict[str, Any]:
    """Category means and the weighted overall; ``complete`` only when every id 1-1000 has a score.

    On a slice (``sliced``: only some ids were asked for) the overall is the slice's own: the weighted
    mean over the categories the slice holds, their weights scaled to sum to 1 (``overall_on_slice``)."""
    categories: dict[str, Any] = {}
    for name, _, _ in protocol.ranges:
        scores = [r["score"] for r in rows if r["category"] == name and r.get("status") == "ok"]
        categories[name] = {"score": mean(scores), "n": len(scores)}
    scored_ids = {int(r["id"]) for r in rows if r.get("status") == "ok"}
    missing = 1000 - len(scored_ids & set(range(1, 1001)))
    values = {name: c["score"] for name, c in categories.items()}
    overall = None
    if all(v is not None for v in values.values()):
        overall = sum(protocol.weights[n] * float(v) for n, v in values.items() if v is not None)
    result: dict[str, Any] = {
        "overall": overall,
        "categories": categories,
        "weights": protocol.weights,
        "complete": missing == 0,
    }
    present = {n: float(v) for n, v in values.items() if v is not None}
    if sliced and present:
        weight = sum(protocol.weights[n] for n in present)
        result["overall"] = sum(protocol.weights[n] * v for n, v in present.items()) / weight
        result["overall_on_slice"] = True
        result["slice_note"] = (
            f"overall of a slice: the weighted mean over its {len(present)} categories "
            f"({', '.join(present)}), weights scaled to sum to 1; not comparable with a full-set overall"
        )
    elif missing:
        result["completeness_note"] = (
            f"{missing} of the ids 1-1000 have no score; the official calculator prints no overall score "
            "unless all 1000 are scored."
        )
    return result


register_system_format(
    "WISE_Verified", VERIFIED_PROMPTS[VERIFIED.system].sha256, ("Score: ", Choice(("0", "1")))
)
register_system_format(
    "WiScore",
    LEGACY_PROMPTS[LEGACY.system].sha256,
    ("Consistency: ", scores(0, 2), "\nRealism: ", scores(0, 2), "\nAesthetic Quality: ", scores(0, 2)),
)
