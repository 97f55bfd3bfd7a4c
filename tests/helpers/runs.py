"""Run folders as the pipeline writes them: built from a table, the schema-1 fixture, a reward rollout."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from interleave_thinker.core.types import (
    WHITE_CANVAS,
    Attempt,
    Plan,
    PlannerRecord,
    PlanStep,
    Request,
    StepRecord,
    Trace,
    Verdict,
)
from tests.helpers.common import FIXTURES


def _image(path: Path, color: tuple[int, int, int]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), color).save(path)
    return path.name


def make_run(
    root: Path, name: str, steps: list[list[tuple[bool | None, float]]], *, plan: bool = True
) -> Path:
    """A run folder as the pipeline writes it: trace.json, images/ and judge scores per attempt."""
    run = root / name
    plan_steps = [
        PlanStep(step_number=i, step_name=f"s{i}", instruction=f"do {i}", prompt=f"prompt {name} {i}")
        for i in range(1, len(steps) + 1)
    ]
    records, scores = [], {}
    before = WHITE_CANVAS
    for i, attempts in enumerate(steps, start=1):
        record = StepRecord(
            step=plan_steps[i - 1], kind="image", text=f"do {i}", planned_prompt=plan_steps[i - 1].prompt
        )
        prompt = plan_steps[i - 1].prompt or ""
        for a, (label, score) in enumerate(attempts):
            image = _image(run / "images" / f"step{i:02d}_attempt{a}.png", (i * 40, a * 60, 100))
            verdict = (
                None
                if label is None
                else Verdict(success=label, refine_prompt=f"{prompt} better", reasoning="r")
            )
            attempt = Attempt(
                step_number=i,
                attempt=a,
                prompt=prompt,
                seed=i * 100 + a,
                before_image=before,
                image_file=image,
                critic_called=label is not None,
                verdict=verdict,
                accepted=bool(label) or a == len(attempts) - 1,
            )
            record.attempts.append(attempt)
            scores[f"{name}#{i}#{a}"] = [score, score]
            if verdict and not verdict.success:
                prompt = verdict.refine_prompt
        record.accepted_image = record.attempts[-1].image_file
        before = record.accepted_image
        records.append(record)
    trace = Trace(
        request=Request(text=f"request {name}"),
        planner=PlannerRecord(plan=Plan(steps=plan_steps, reasoning="because", fallback=not plan)),
        steps=records,
        status="succeeded",
    )
    (run / "trace.json").write_text(trace.model_dump_json(indent=2))
    (run / "judge_scores.json").write_text(json.dumps(scores))
    return run


# 4. remote.* and prompts.* reach `reward`'s generator and judge.
def rollout(tmp_path: Path) -> Path:
    path = tmp_path / "rollouts.jsonl"
    row = {
        "response": "<answer>{}</answer>",
        "ground_truth": {"success": False, "semantics": 3, "quality": 5},
        "origin_prompt": "a cat",
        "origin_image_path": "before.png",
        "previous_prompt": "a cat",
    }
    path.write_text(json.dumps(row) + "\n")
    return path


V1_RUN = FIXTURES / "trace_v1"
"""A run folder written by the pipeline at schema 1 (see tests/core/test_run_folder.py)."""
FIXTURE_PROMPT = "How do I draw a cat? Show the steps."
