"""One view of a generated trajectory, whether it comes from our own run folder or a release record.

Builders read only this view: the request, the plan, and per step every attempt with the prompt it
used, its before/after images, the critic's label and refinement, and (when known) judge scores.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import IMAGES_DIR, TRACE_FILE, load_trace
from interleave_thinker.core.types import WHITE_CANVAS, PlanStep
from interleave_thinker.train.data.examples import TrajectoryRecord
from interleave_thinker.train.data.issues import DatasetError
from interleave_thinker.train.data.loaders import load_record

RECORD_FILE = "execution_record.json"
SCORES_FILE = "judge_scores.json"
"""Judge scores of a source, ``{attempt key: [SC, PQ]}``: read beside traces, written by ``data build``."""


@dataclass
class AttemptView:
    key: str
    step: int
    attempt: int
    planned_prompt: str
    used_prompt: str
    before: Path | None
    """None means the white canvas (text-to-image)."""
    after: Path
    label: bool | None
    refine_prompt: str | None
    reasoning: str | None
    sc: float | None = None
    pq: float | None = None

    @property
    def overall(self) -> float | None:
        return math.sqrt(self.sc * self.pq) if self.sc is not None and self.pq is not None else None


@dataclass
class StepView:
    index: int
    plan_step: PlanStep
    attempts: list[AttemptView] = field(default_factory=list)
    accepted: Path | None = None


@dataclass
class Trajectory:
    source: str
    request: str
    input_images: list[Path]
    reasoning: str | None
    plan: list[PlanStep] | None
    """None when the run had no valid plan (the single-step fallback is not a plan to learn)."""
    steps: list[StepView]


def from_trace(run_dir: Path, name: str | None = None) -> Trajectory:
    """``name`` starts each attempt key (default: the folder's name; a batch's runs use ``requests/<id>``)."""
    path = run_dir / TRACE_FILE
    name = name or run_dir.name
    try:
        trace = load_trace(path)  # an older schema is migrated; a newer one is refused with the fix
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a readable trace ({first}).") from None
    images = run_dir / IMAGES_DIR
    plan = trace.planner.plan
    steps: list[StepView] = []
    for index, record in enumerate(trace.steps, start=1):
        view = StepView(
            index, record.step, accepted=images / record.accepted_image if record.accepted_image else None
        )
        planned = record.planned_prompt  # None in a trace built by hand: the plan step's prompt
        planned = planned if planned is not None else record.step.generation_prompt or ""
        for a in record.attempts:
            if a.image_file is None:
                continue
            verdict = a.verdict
            view.attempts.append(
                AttemptView(
                    key=f"{name}#{index}#{a.attempt}",
                    step=index,
                    attempt=a.attempt,
                    planned_prompt=planned,
                    used_prompt=a.prompt,
                    before=None if a.before_image == WHITE_CANVAS else images / a.before_image,
                    after=images / a.image_file,
                    label=verdict.success if verdict else None,
                    refine_prompt=verdict.refine_prompt if verdict else None,
                    reasoning=verdict.reasoning if verdict else None,
                    # Scores made in the run (`data generate`), so no second judge pass is needed.
                    sc=a.scores.sc if a.scores else None,
                    pq=a.scores.pq if a.scores else None,
                )
            )
        steps.append(view)
    usable = plan is not None and not plan.fallback
    return Trajectory(
        source=str(run_dir),
        request=trace.request.text,
        input_images=[images / name for name in trace.input_images],
        reasoning=plan.reasoning if plan else None,
        plan=list(plan.steps) if usable and plan else None,
        steps=steps,
    )


def from_record(record: TrajectoryRecord, source: str) -> Trajectory:
    """Entries of the same step are its attempts, in order; attempt k used attempt k-1's refinement."""
    by_step: dict[int, list[int]] = defaultdict(list)
    for i, entry in enumerate(record.steps):
        by_step[entry.step].append(i)
    plan = {s.step_number: s for s in record.plan}
    steps: list[StepView] = []
    for number in sorted(by_step):
        entries = [record.steps[i] for i in by_step[number]]
        plan_step = plan.get(number) or PlanStep(step_number=number, prompt=entries[0].prompt)
        view = StepView(number, plan_step)
        used = entries[0].prompt
        for attempt, entry in enumerate(entries):
            view.attempts.append(
                AttemptView(
                    key=f"{Path(source).parent.name}#{number}#{attempt}",
                    step=number,
                    attempt=attempt,
                    planned_prompt=entry.prompt,
                    used_prompt=used,
                    before=entry.source_img,
                    after=entry.target_img,
                    label=entry.success,
                    refine_prompt=entry.refine_prompt,
                    reasoning=entry.reasoning,
                    sc=entry.semantics,
                    pq=entry.quality,
                )
            )
            used = entry.refine_prompt.strip() or used
        accepted = [e for e in entries if e.success]
        view.accepted = (accepted[-1] if accepted else entries[-1]).target_img
        steps.append(view)
    return Trajectory(
        source=source,
        request=record.user_input,
        input_images=list(record.input_images),
        reasoning=record.reasoning,
        plan=list(record.plan),
        steps=steps,
    )


def read_scores(folder: Path) -> dict[str, tuple[float, float]]:
    path = folder / SCORES_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): (float(v[0]), float(v[1])) for k, v in data.items()}
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise InputError(f"{path}: expected {{attempt key: [SC, PQ]}} ({exc}).") from None


def find_runs(source: Path) -> list[Path]:
    """Run folders at or below ``source``: itself, ``*/`` (a folder of runs) or ``*/*/`` (a batch,
    whose runs are ``requests/<id>/``, or a folder of such), sorted; the shallowest level found wins."""
    if (source / TRACE_FILE).is_file():
        return [source]
    for pattern in (f"*/{TRACE_FILE}", f"*/*/{TRACE_FILE}", f"*/*/*/{TRACE_FILE}"):
        found = sorted(p.parent for p in source.glob(pattern))
        if found:
            return found
    return []


def discover(source: Path, *, image_dir: Path | None = None) -> list[Trajectory]:
    """Run folders (``trace.json``: a run, a folder of runs, a batch) or trajectory records below ``source``."""
    if not source.exists():
        raise InputError(f"--input {source}: no such file or folder.")
    if source.is_file():
        return [from_record(load_record(source, image_dir=image_dir), str(source))]
    traces = find_runs(source)
    # A record beside a trace.json (`data generate` writes both) is the same trajectory: read the trace.
    records = sorted(p for p in source.rglob(RECORD_FILE) if not (p.parent / TRACE_FILE).is_file())
    if not traces and not records:
        raise InputError(
            f"--input {source}: found no {TRACE_FILE} (a run folder, a folder of runs or a batch folder) "
            f"and no {RECORD_FILE}."
        )
    found: list[Trajectory] = []
    problems: list[str] = []
    for run in traces:
        relative = run.relative_to(source).as_posix()
        trajectory = from_trace(run, relative if "/" in relative else None)
        scores = read_scores(run)
        for step in trajectory.steps:
            for a in step.attempts:
                if a.key in scores:
                    a.sc, a.pq = scores[a.key]
        found.append(trajectory)
    for path in records:
        try:
            found.append(from_record(load_record(path, image_dir=image_dir), str(path)))
        except DatasetError as exc:
            problems.append(str(exc))
    if problems:
        raise InputError("\n".join(problems))
    return found
