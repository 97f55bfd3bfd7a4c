"""The rows `interleave-thinker reward` reads: our rollouts, or the release's ``critic_rl`` rows as they are.

Why a module: the release's rows are GRPO prompts (``problem`` with ``<image>`` markers, ``images``,
``evaluation``), not rollouts, so they carry no ``response``; the command answers them with a critic
(``--critic``) first. Field names and their aliases are read here once, and every problem names the
file, the line and the field (docs/training-data.md, "Rows `reward` reads").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.agents.messages import IMAGE_MARKER, image_part, text_part, user_turn
from interleave_thinker.backends.protocols import Message, VLMBackend
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.images import open_rgb

ALIASES = {
    "ground_truth": ("ground_truth", "evaluation"),
    "previous_prompt": ("previous_prompt", "rewritten_prompt"),
}
"""Our name first, then the release's."""


@dataclass
class RewardRow:
    """One input line as read (``row``, written back unchanged) and the columns the critic reward needs."""

    row: dict[str, Any]
    where: str
    ground_truth: dict[str, Any]
    origin_prompt: str
    origin_image_path: str
    previous_prompt: str
    response: str | None
    """None for a release row until the critic answers it."""


def _pick(row: dict[str, Any], where: str, name: str) -> Any:
    for key in ALIASES.get(name, (name,)):
        if key in row:
            return row[key]
    names = " or ".join(ALIASES.get(name, (name,)))
    raise InputError(f"{where}: {names}: missing (needed by the critic reward).")


def _text(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: {name}: must be a string, not {type(value).__name__}.")
    return value


def _truth(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, dict) or "success" not in value:
        raise InputError(f"{where}: ground_truth (or evaluation): needs success, semantics and quality.")
    return value


def _origin_image(row: dict[str, Any], where: str) -> str:
    """``origin_image_path``, else the first of ``images`` (the "before" image, as the release lays it out)."""
    if "origin_image_path" in row:
        return _text(row["origin_image_path"], where, "origin_image_path")
    images = row.get("images")
    if isinstance(images, list) and images and isinstance(images[0], str):
        return images[0]
    raise InputError(f"{where}: origin_image_path: missing, and images has no first image to use instead.")


def parse_row(row: dict[str, Any], where: str) -> RewardRow:
    response = row.get("response")
    return RewardRow(
        row=row,
        where=where,
        ground_truth=_truth(_pick(row, where, "ground_truth"), where),
        origin_prompt=_text(_pick(row, where, "origin_prompt"), where, "origin_prompt"),
        origin_image_path=_origin_image(row, where),
        previous_prompt=_text(_pick(row, where, "previous_prompt"), where, "previous_prompt"),
        response=None if response is None else _text(response, where, "response"),
    )


def read_reward_rows(path: Path) -> list[RewardRow]:
    """JSONL rollouts or release ``critic_rl`` rows; every problem names the file, the line and the field."""
    if not path.is_file():
        raise InputError(f"Rollout file {path} does not exist.")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg}).") from None
        if not isinstance(row, dict):
            raise InputError(f"{where}: each line must be a JSON object.")
        rows.append(parse_row(row, where))
    return rows


def unanswered(rows: list[RewardRow], critic: str | None) -> list[RewardRow]:
    """The rows with no ``response``; without a critic to answer them, the first one is an error."""
    missing = [r for r in rows if r.response is None]
    if missing and critic is None:
        raise InputError(
            f"{missing[0].where}: response: missing ({len(missing)} row(s)). A release critic_rl row is a "
            "prompt: pass --critic SPEC to answer it, or add the critic's reply as response."
        )
    return missing


def critic_conversation(row: RewardRow, base_dir: Path) -> list[Message]:
    """The row's ``problem`` with its ``images`` where its ``<image>`` markers stand, as the release asks."""
    problem = _text(row.row.get("problem"), row.where, "problem")
    paths = row.row.get("images")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise InputError(f"{row.where}: images: must be a list of image paths to ask the critic.")
    pieces = IMAGE_MARKER.split(problem)
    if len(pieces) - 1 != len(paths):
        raise InputError(
            f"{row.where}: images: {len(paths)} image(s) but {len(pieces) - 1} <image> marker(s) in problem; "
            "put one <image> in problem where each image belongs, in order."
        )
    parts = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(text_part(piece))
        if i < len(paths):
            path = Path(paths[i]) if Path(paths[i]).is_absolute() else base_dir / paths[i]
            try:
                parts.append(image_part(open_rgb(str(path))))
            except OSError as exc:
                raise InputError(f"{row.where}: images[{i}]: cannot read {path} ({exc}).") from None
    return user_turn(*parts)


def answer_rows(
    critic: VLMBackend, rows: list[RewardRow], base_dir: Path, *, max_new_tokens: int, batch_size: int
) -> None:
    """Fill each row's ``response`` with the critic's greedy reply to its ``problem``."""
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        replies = critic.chat_batch(
            [critic_conversation(r, base_dir) for r in batch], max_new_tokens=max_new_tokens, temperature=0.0
        )
        for row, reply in zip(batch, replies, strict=True):
            row.response = reply


def score_rows(
    reward_fn: Any, rows: list[RewardRow], sample_concurrency: int, advance: Callable[[int], object]
) -> tuple[list[str], dict[str, int]]:
    """Output lines (each input row plus its response and reward parts) and the step-wise counts;
    ``sample_concurrency`` rows are scored at once."""
    lines: list[str] = []
    counts = {"scored": 0, "skipped": 0, "failed": 0}
    for start in range(0, len(rows), sample_concurrency):
        batch = rows[start : start + sample_concurrency]
        reward_fn(
            None,
            [r.response for r in batch],
            ground_truth=[r.ground_truth for r in batch],
            origin_prompt=[r.origin_prompt for r in batch],
            origin_image_path=[r.origin_image_path for r in batch],
            previous_prompt=[r.previous_prompt for r in batch],
        )
        counts = {name: counts[name] + reward_fn.last_counts[name] for name in counts}
        for row, parts in zip(batch, reward_fn.last_components, strict=True):
            keep = {k: parts[k] for k in ("overall", "format", "accuracy", "semantic", "quality")}
            written = row.row | {"response": row.response} | keep | {"reward_error": parts["error"]}
            lines.append(json.dumps(written, ensure_ascii=False))
        advance(len(batch))
    return lines, counts
