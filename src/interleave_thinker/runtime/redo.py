"""Redo from a step: a run's steps before K taken as they are, step K and the steps after it generated
again, into a new run folder that records its parent (``Pipeline.redo``, ``run --resume-from``).

Why: a user who dislikes step 3 of a finished six-step sample would otherwise run the whole sample again.
The plan and the steps before K are copied from the parent's trace, their images byte for byte, so no
planner, generator or critic call is made for them; the new folder then holds an interrupted run of the
same request, which the loop's resume continues at step K (``StepLoop.run``). ``instruction`` replaces
step K's instruction and prompt in the plan; a new ``loop.seed_base`` (the caller's) applies from step K
on. The parent folder is only read, so a redo of a redo works the same way.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import image_path, load_trace, trace_path, write_trace
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import RunParent, Trace
from interleave_thinker.runtime.recorder import RunRecorder
from interleave_thinker.runtime.resume import resume_recorder


def kept_steps(trace: Trace) -> int:
    """How many steps, from the first, finished with what they show: a redo keeps at most these (a failed
    step, complete but with no image kept, is redone, never kept)."""
    return next((i for i, s in enumerate(trace.steps) if not s.settled), len(trace.steps))


def start_redo(
    parent: Path,
    out: Path,
    step: int,
    instruction: str | None,
    seed_base: int | None,
    settings: dict[str, Any],
    backends: dict[str, str],
) -> RunRecorder:
    """Write into ``out`` the run in ``parent`` cut before ``step`` (recording its parent, the new
    ``settings`` and ``backends``), and return its recorder, ready for the loop to continue."""
    trace = _parent_trace(parent)
    plan = trace.planner.plan
    if plan is None:
        raise InputError(
            f"{trace_path(parent)} holds no plan: run the request again instead of redoing a step."
        )
    if not 1 <= step <= len(plan.steps):
        raise InputError(f"--redo-step {step}: the run in {parent} has steps 1 to {len(plan.steps)}.")
    done = kept_steps(trace)
    if done < step - 1:
        raise InputError(
            f"--redo-step {step}: step {done + 1} of the run in {parent} did not finish; redo from step {done + 1}."
        )
    if trace_path(out).exists():
        raise InputError(f"{out} holds a run already; give a new output folder for the redo.")
    new = _cut(trace, step)
    if instruction is not None:
        text = clean_text(instruction).strip()
        if not text:
            raise InputError("--instruction is empty; say what step K should show, or leave it out.")
        plan_step = new.planner.plan.steps[step - 1]  # type: ignore[union-attr]  # checked above
        plan_step.instruction = plan_step.prompt = text
    new.settings, new.backends = settings, backends
    new.parent = RunParent(run=str(parent), step=step, instruction=instruction, seed_base=seed_base)
    for name in _images(new):
        target = image_path(out, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image_path(parent, name), target)  # byte for byte
    write_trace(out, new)
    recorder = resume_recorder(out, new.request)
    assert recorder is not None  # just written
    return recorder


def _parent_trace(parent: Path) -> Trace:
    path = trace_path(parent)
    if not path.is_file():
        raise InputError(f"--resume-from {parent}: no trace.json there; give the folder of a run.")
    try:
        return load_trace(path)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InputError(f"{path} cannot be read ({str(exc)[:160]}).") from None


def _cut(trace: Trace, step: int) -> Trace:
    """A copy of ``trace`` holding the plan and the steps before ``step``, as a run not yet finished."""
    new = trace.model_copy(deep=True)
    new.steps = new.steps[: step - 1]
    new.created_at = datetime.now(UTC).isoformat(timespec="seconds")
    new.status, new.error, new.duration_s = "running", None, 0.0
    new.repair, new.fallbacks = None, []
    return new


def _images(trace: Trace) -> list[str]:
    """The images a cut trace refers to: its inputs, then every attempt's and each kept one of its steps."""
    names = list(trace.input_images)
    for step in trace.steps:
        names += [a.image_file for a in step.attempts if a.image_file]
        names += [step.accepted_image] if step.accepted_image else []
    return list(dict.fromkeys(names))
