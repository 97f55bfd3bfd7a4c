"""Run folders as the pipeline writes them: built from a table, a batch of speckled pictures for the tiny
judge, the schema-1 fixture, a reward rollout, a run with reference images."""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image

from interleave_thinker import Pipeline
from interleave_thinker.agents.critic import format_verdict
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.backends.protocols import Message
from interleave_thinker.core.prompt_store import builtin_templates
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
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.common import FIXTURES
from tests.helpers.pipelines import scripted_config


def _image(path: Path, color: tuple[int, int, int]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), color).save(path)
    return path.name


def accept_last(record: StepRecord) -> str:
    """Accept the step's last attempt; its image file (the next step's image before)."""
    image = record.attempts[-1].image_file
    assert image is not None  # every attempt these helpers write names its image
    record.accepted_image = image
    return image


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
        before = accept_last(record)
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


BRIGHT = (220, 150, 220)
DARK = (40, 20, 40)


def noisy(path: Path, color: tuple[int, int, int], seed: int) -> Path:
    """A 64x64 picture of one colour with seeded speckle, like the judge's training pictures."""
    rng = random.Random(seed)
    image = Image.new("RGB", (64, 64), color)
    pixels = image.load()
    assert pixels is not None
    for _ in range(64 * 64 // 8):
        x, y = rng.randrange(64), rng.randrange(64)
        pixels[x, y] = tuple(min(255, max(0, c + rng.randint(-60, 60))) for c in color)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


def make_batch(root: Path, requests: int = 2) -> Path:
    """A batch folder as `batch` writes it: ``requests/<id>/trace.json`` with images, no judge scores.

    Per request: step 1 one bright attempt the critic accepted; step 2 a dark attempt the critic
    rejected, then a bright one it accepted.
    """
    for r in range(requests):
        run = root / "requests" / f"req{r}"
        steps = [
            PlanStep(
                step_number=1, step_name="Sketch", instruction="Sketch the cat.", prompt="sketch the cat"
            ),
            PlanStep(
                step_number=2, step_name="Colour", instruction="Colour the cat.", prompt="colour the cat"
            ),
        ]
        records = []
        before = WHITE_CANVAS
        for i, colours in enumerate([[BRIGHT], [DARK, BRIGHT]], start=1):
            record = StepRecord(step=steps[i - 1], kind="image", text=steps[i - 1].instruction)
            prompt = steps[i - 1].prompt or ""
            for a, colour in enumerate(colours):
                name = f"step{i:02d}_attempt{a}.png"
                noisy(run / "images" / name, colour, 100 * r + 10 * i + a)
                ok = colour == BRIGHT
                verdict = Verdict(
                    success=ok, refine_prompt=prompt if ok else f"{prompt}, brighter", reasoning="r"
                )
                record.attempts.append(
                    Attempt(
                        step_number=i,
                        attempt=a,
                        prompt=prompt,
                        seed=a,
                        before_image=before,
                        image_file=name,
                        critic_called=True,
                        verdict=verdict,
                        accepted=ok,
                    )
                )
                prompt = verdict.refine_prompt
            before = accept_last(record)
            records.append(record)
        trace = Trace(
            request=Request(text="How to draw a cat step by step?"),
            planner=PlannerRecord(plan=Plan(steps=steps, reasoning="Two image steps.")),
            steps=records,
            status="succeeded",
        )
        (run / "trace.json").write_text(trace.model_dump_json(indent=2))
    return root


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


# 5. A run made with `loop.references: anchor`, the start of the critic's training rows with references.
ANCHORED_SIZE = 32
ANCHORED_VERDICTS = [False, True, True, False, True, False, True]
"""The critic's verdicts, in call order: step 1 rejected then accepted, step 2 accepted, step 3 rejected
then accepted, step 4 rejected then accepted."""
ANCHORED_SCORES = {1: [3.0, 8.5], 2: [9.0], 3: [2.0, 9.0], 4: [9.0, 3.0]}
"""Judge scores (SC = PQ) of each step's attempts: steps 1 and 3 a refinement trend, step 2 stable and
high (SFT), step 4 high variance (RL)."""


def anchored_run(root: Path) -> tuple[Path, list[list[Message]]]:
    """A guidance request of four steps run by the real pipeline on scripted backends under
    ``loop.references: anchor``, written to ``root/anchored`` with ``judge_scores.json``; and every
    message the critic received, in order. Steps 1 to 4 show the critic 0, 1, 2 and 2 references."""
    steps = [
        PlanStep(
            step_number=i, step_name=f"Scene {i}", instruction=f"Scene {i}", prompt=f"the fox, scene {i}"
        )
        for i in range(1, 5)
    ]
    verdicts = iter(ANCHORED_VERDICTS)

    def review(messages: list[Message]) -> str:
        ok = next(verdicts)
        return format_verdict(
            Verdict(success=ok, refine_prompt="" if ok else "the fox, redder", reasoning="r")
        )

    critic = ScriptedVLMBackend([review], repeat_last=True)
    pipe = Pipeline(
        planner=ScriptedVLMBackend([format_plan(Plan(steps=steps, reasoning="four scenes"))]),
        critic=critic,
        generator=ScriptedImageBackend(),
        config=scripted_config(ANCHORED_SIZE, 1, loop={"references": "anchor"}),
        templates=builtin_templates(),
    )
    run = root / "anchored"
    subject = Image.new("RGB", (ANCHORED_SIZE, ANCHORED_SIZE), (200, 40, 40))
    assert pipe("<image> The fox in four scenes.", [subject], out_dir=run).ok
    scores = {
        f"anchored#{s}#{a}": [v, v] for s, values in ANCHORED_SCORES.items() for a, v in enumerate(values)
    }
    (run / "judge_scores.json").write_text(json.dumps(scores))
    return run, critic.calls
