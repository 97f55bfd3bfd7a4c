"""One view of a generated trajectory, whether it comes from our own run folder or a release record.

Builders read only this view: the request, the plan, and per step every attempt with the prompt it
used, its before/after images, the critic's label and refinement, and (when known) judge scores.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast, get_args

from interleave_thinker.core.config import ReferencePolicy
from interleave_thinker.core.errors import InputError, TraceVersionError
from interleave_thinker.core.run_folder import TRACE_FILE, load_trace, run_image
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import WHITE_CANVAS, PlanStep, Trace
from interleave_thinker.core.untrusted import (
    MAX_JSON_BYTES,
    ImageLimits,
    UnsafeFile,
    is_within,
    load_json,
    read_bounded,
)
from interleave_thinker.train.data.examples import TrajectoryRecord
from interleave_thinker.train.data.issues import DatasetError
from interleave_thinker.train.data.loaders import load_record

POLICIES: tuple[str, ...] = get_args(ReferencePolicy)
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
    references: tuple[Path, ...] = ()
    """The reference images the critic saw after before and after (``loop.references``), in order."""

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
    references_policy: ReferencePolicy = "release"
    """The run's ``loop.references`` (a release record's: ``release``)."""


def from_trace(run_dir: Path, name: str | None = None, limits: ImageLimits | None = None) -> Trajectory:
    """``name`` starts each attempt key (default: the folder's name; a batch's runs use ``requests/<id>``).

    The run is data: its trace is read bounded and every image it names is checked
    (:func:`~interleave_thinker.core.run_folder.run_image`); any problem is an :class:`InputError`
    naming the file and field (an :class:`~interleave_thinker.core.untrusted.UnsafeFile` for an image)."""
    path = run_dir / TRACE_FILE
    name = name or run_dir.name
    trace = _read_trace(path)

    def image(file: str, field: str) -> Path:
        return run_image(run_dir, file, what=f"{path} {field}", limits=limits)

    plan = trace.planner.plan
    steps: list[StepView] = []
    for index, record in enumerate(trace.steps, start=1):
        where = f"steps[{index - 1}]"
        accepted = image(record.accepted_image, f"{where}.accepted_image") if record.accepted_image else None
        view = StepView(index, record.step, accepted=accepted)
        planned = record.planned_prompt  # None in a trace built by hand: the plan step's prompt
        planned = planned if planned is not None else record.step.generation_prompt or ""
        for number, a in enumerate(record.attempts):
            if a.image_file is None:
                continue
            verdict = a.verdict
            field = f"{where}.attempts[{number}]"
            before = a.before_image
            view.attempts.append(
                AttemptView(
                    key=f"{name}#{index}#{a.attempt}",
                    step=index,
                    attempt=a.attempt,
                    planned_prompt=planned,
                    used_prompt=a.prompt,
                    before=None if before == WHITE_CANVAS else image(before, f"{field}.before_image"),
                    after=image(a.image_file, f"{field}.image_file"),
                    label=verdict.success if verdict else None,
                    refine_prompt=verdict.refine_prompt if verdict else None,
                    reasoning=verdict.reasoning if verdict else None,
                    # Scores made in the run (`data generate`), so no second judge pass is needed.
                    sc=a.scores.sc if a.scores else None,
                    pq=a.scores.pq if a.scores else None,
                    references=tuple(
                        image(name, f"{field}.references[{i}]") for i, name in enumerate(a.references)
                    ),
                )
            )
        steps.append(view)
    usable = plan is not None and not plan.fallback
    return Trajectory(
        source=str(run_dir),
        request=trace.request.text,
        input_images=[image(file, f"input_images[{i}]") for i, file in enumerate(trace.input_images)],
        reasoning=plan.reasoning if plan else None,
        plan=list(plan.steps) if usable and plan else None,
        steps=steps,
        references_policy=_policy(trace.settings, path),
    )


def _read_trace(path: Path) -> Trace:
    """The trace, read bounded; an older schema is migrated, a newer one refused (as an InputError)."""
    try:
        return load_trace(path, max_bytes=MAX_JSON_BYTES)
    except (OSError, ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a readable trace ({first}).") from None


def _policy(settings: dict[str, object], path: Path) -> ReferencePolicy:
    """The ``settings.loop.references`` a trace recorded (absent: the release's), checked."""
    loop = settings.get("loop")
    value = loop.get("references", "release") if isinstance(loop, dict) else "release"
    if value not in POLICIES:
        raise InputError(
            f"{path}: settings.loop.references {str(value)[:40]!r} is not one of {', '.join(POLICIES)}."
        )
    return cast(ReferencePolicy, value)


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
        data = load_json(read_bounded(path, MAX_JSON_BYTES, what=SCORES_FILE))
        return {str(k): (float(v[0]), float(v[1])) for k, v in data.items()}
    except (ValueError, TypeError, IndexError, AttributeError, KeyError) as exc:
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


@dataclass
class Discovery:
    """What a source holds: the trajectories read, and the runs or records that failed, each
    ``{"run": path below the source, "reason": one line}`` (a bad run fails alone)."""

    trajectories: list[Trajectory] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)


def find_trajectories(
    source: Path, *, image_dir: Path | None = None, limits: ImageLimits | None = None
) -> Discovery:
    """Run folders (``trace.json``: a run, a folder of runs, a batch) or trajectory records below
    ``source``; each one that cannot be read (a bad trace, an image path out of its folder, a missing
    or non-image file, a nesting too deep) is listed in ``failed`` and the others are read. A trace of
    a newer schema stops everything (:class:`TraceVersionError`): upgrade, rather than skip it."""
    if not source.exists():
        raise InputError(f"--input {source}: no such file or folder.")
    if source.is_file():
        return Discovery([from_record(load_record(source, image_dir=image_dir), str(source))])
    traces = find_runs(source)
    # A record beside a trace.json (`data generate` writes both) is the same trajectory: read the trace.
    records = sorted(p for p in source.rglob(RECORD_FILE) if not (p.parent / TRACE_FILE).is_file())
    if not traces and not records:
        raise InputError(
            f"--input {source}: found no {TRACE_FILE} (a run folder, a folder of runs or a batch folder) "
            f"and no {RECORD_FILE}."
        )
    found = Discovery()
    for run in traces:
        relative = run.relative_to(source).as_posix()
        try:
            found.trajectories.append(_scored_run(source, run, relative, limits))
        except TraceVersionError:
            raise
        except (InputError, OSError, ValueError, RecursionError) as exc:
            found.failed.append({"run": relative or run.name, "reason": _reason(exc)})
    for path in records:
        try:
            if not is_within(path, source):
                raise UnsafeFile(f"{path} is a symbolic link out of --input {source}.", "unsafe_path")
            found.trajectories.append(from_record(load_record(path, image_dir=image_dir), str(path)))
        except (InputError, OSError, ValueError, RecursionError) as exc:  # DatasetError is an InputError
            found.failed.append({"run": path.relative_to(source).as_posix(), "reason": _reason(exc)})
    return found


def _scored_run(source: Path, run: Path, relative: str, limits: ImageLimits | None) -> Trajectory:
    if not is_within(run, source):
        raise UnsafeFile(f"{run} is a symbolic link out of --input {source}.", "unsafe_path")
    trajectory = from_trace(run, relative if "/" in relative else None, limits)
    scores = read_scores(run)
    for step in trajectory.steps:
        for a in step.attempts:
            if a.key in scores:
                a.sc, a.pq = scores[a.key]
    return trajectory


MAX_REASON = 300


def _reason(exc: BaseException) -> str:
    """One bounded line: the error's own message (ours name the file and field), else its type too."""
    if isinstance(exc, DatasetError) and exc.issues:
        more = f" (and {len(exc.issues) - 1} more problem(s))" if len(exc.issues) > 1 else ""
        text = f"{exc.issues[0]}{more}"
    else:
        message = str(exc)[: MAX_REASON * 4]
        text = message if isinstance(exc, InputError) else f"{type(exc).__name__}: {message}"
    flat = " ".join(clean_text(text).split())
    return flat if len(flat) <= MAX_REASON else flat[: MAX_REASON - 1] + "…"


def discover(
    source: Path, *, image_dir: Path | None = None, limits: ImageLimits | None = None
) -> list[Trajectory]:
    """Every trajectory below ``source`` (:func:`find_trajectories`); any failed run or record is an
    :class:`InputError` listing them all (the Python API's strict reading; the commands go on without them)."""
    found = find_trajectories(source, image_dir=image_dir, limits=limits)
    if found.failed:
        raise InputError("\n".join(f"{f['run']}: {f['reason']}" for f in found.failed))
    return found.trajectories
