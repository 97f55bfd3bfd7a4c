"""Resume: what a restarted run or batch keeps, what it runs again, and what it writes again.

Every decision a restart makes is here; the rest of the runtime asks:

- a batch folder continues only with the settings it started with (:func:`merged_manifest`, which
  names every differing setting); ``--fresh`` moves the earlier work aside instead (:func:`move_aside`);
- a request with a journal line is done and skipped, unless it failed and failed requests are
  retried (the default; ``--no-retry-failed`` keeps them): :func:`pending`; the journal is not trusted
  over the disk: a finished request whose trace does not parse, or whose listed images are gone, runs
  again (:func:`damage`, asked once per request by the run store);
- a failed request that runs again keeps its plan and its complete steps, or starts over when it
  has no plan or its trace cannot be read (:func:`reopen_folder`; ``run --resume`` on a failed run:
  :func:`reopen_if_failed`; a batch's journaled failure: :func:`reopen_if_journaled_failed`);
- a trace on disk is continued after its last complete step; images of the interrupted step and
  writes a kill cut short are deleted (:func:`resume_recorder`); a finished one is returned as it is;
- pages missing because a kill came between the last trace write and the pages are written again
  (:func:`restore_pages`).

A trace of a newer schema is never taken for a broken one: reading it raises
:class:`~interleave_thinker.core.errors.TraceVersionError`, so nothing here deletes or rewrites it.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interleave_thinker.core.config import GenerationOptions, LoopOptions
from interleave_thinker.core.errors import InputError, TraceVersionError
from interleave_thinker.core.images import open_rgb
from interleave_thinker.core.run_folder import (
    IMAGES_DIR,
    LOCK_FILE,
    MANIFEST,
    has_pages,
    image_path,
    load_trace,
    read_trace,
    remove_partial_writes,
    trace_path,
    write_trace,
)
from interleave_thinker.core.settings_diff import setting_differences
from interleave_thinker.core.types import Request, Trace
from interleave_thinker.runtime.batch_inputs import FINGERPRINT_FIELDS, BatchItem
from interleave_thinker.runtime.documents import write_documents
from interleave_thinker.runtime.failures import failure_reason, one_line
from interleave_thinker.runtime.recorder import RunRecorder
from interleave_thinker.runtime.repair import repair_images

FINISHED = ("succeeded", "failed")


def is_finished(trace: Trace) -> bool:
    return trace.status in FINISHED


# --- batches ---------------------------------------------------------------------------------------------


def with_added_defaults(recorded: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Recorded settings plus the loop and generation keys they lack where ``given`` has the key's
    default: an older version that wrote them ran with the default behaviour, so a resume must not take
    a key added since (``loop.generator_budget``) for a changed setting."""
    filled = dict(recorded)
    for section, model in (("loop", LoopOptions), ("generation", GenerationOptions)):
        old, new = recorded.get(section), given.get(section)
        if isinstance(old, dict) and isinstance(new, dict):
            defaults = model().model_dump(mode="json")
            added = {k: v for k, v in new.items() if k not in old and k in defaults and v == defaults[k]}
            filled[section] = {**old, **added}
    return filled


def merged_manifest(
    path: Path, manifest: dict[str, Any], *, resume: bool, accept_changed: bool = False
) -> dict[str, Any]:
    """The manifest to write at ``path``: ``manifest``, with the ids of the batch it continues first.

    A used folder without ``resume``, or one started with other settings, is an error naming each
    differing setting and the way out (``--fresh`` or another ``--out``): two runs must not mix in one
    folder. So is a request whose prompt, images or task differ from those the batch recorded for its
    id (the first one named), unless ``accept_changed`` (``--accept-changed-input``).
    """
    if not path.exists():
        return manifest
    root = path.parent
    way_out = (
        f"run it with --fresh to move the earlier one aside (to {aside_path(root)}) and start over, "
        "or use another --out."
    )
    if not resume:
        raise InputError(f"{root} already holds a batch; use --resume to continue it, or {way_out}")
    previous = read_state(path)
    given = manifest.get("settings") or {}
    differences = setting_differences(with_added_defaults(previous.get("settings") or {}, given), given)
    if differences:
        lines = "\n".join(f"  {line}" for line in differences)
        raise InputError(
            f"{path} was written with other settings (recorded -> given):\n{lines}\n"
            f"Resume with the same options, or {way_out}"
        )
    recorded, now = previous.get("requests") or {}, manifest.get("requests") or {}
    changed = changed_requests(previous, manifest)
    if changed and not accept_changed:
        first = changed[0]
        fields = [
            f
            for f, old, new in zip(FINGERPRINT_FIELDS, recorded[first], now[first], strict=False)
            if old != new
        ]
        more = f" ({len(changed) - 1} more requests differ too)" if len(changed) > 1 else ""
        raise InputError(
            f"{path}: request {first!r} differs from the one this batch started with: its "
            f"{' and '.join(fields) or 'fingerprint'} changed in the input{more}. Resume with the input the batch "
            f"started with, pass --accept-changed-input to run the changed requests again (their earlier "
            f"outputs move to {aside_path(root)}), or {way_out}"
        )
    merged = list(dict.fromkeys([*previous.get("ids", []), *manifest.get("ids", [])]))
    requests = {**recorded, **now}
    return {**manifest, "ids": merged} | ({"requests": requests} if requests else {})


def changed_requests(previous: dict[str, Any], manifest: dict[str, Any]) -> list[str]:
    """The ids of ``manifest`` whose request fingerprint differs from the one ``previous`` recorded (an
    id either lacks, as in a manifest written before fingerprints, is not a change)."""
    recorded, now = previous.get("requests") or {}, manifest.get("requests") or {}
    return [i for i in manifest.get("ids", []) if i in recorded and i in now and recorded[i] != now[i]]


def read_state(path: Path) -> dict[str, Any]:
    """A batch folder's ``batch.json``, or :class:`InputError` naming it and the way out when it cannot
    be read (a crash or a full disk cut it short, or someone else wrote it)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{path} cannot be read ({failure_reason(exc)[:160]}); run with --fresh to move the earlier "
            f"batch aside (to {aside_path(path.parent)}) and start over, or use another --out."
        ) from None
    if not isinstance(value, dict):
        raise InputError(
            f"{path} does not hold a batch's settings; run with --fresh to move the earlier batch aside "
            f"(to {aside_path(path.parent)}) and start over, or use another --out."
        )
    return value


def aside_path(root: Path) -> Path:
    """Where ``--fresh`` moves the work in ``root``: ``<root>.old-<UTC time of its batch.json>``.

    The time is the manifest's (else the folder's) modification time, so the path a refusal names is
    the path a following ``--fresh`` uses; a taken name gets ``-2``, ``-3``, ...
    """
    stamp_of = root / MANIFEST if (root / MANIFEST).exists() else root
    stamp = datetime.fromtimestamp(stamp_of.stat().st_mtime, tz=UTC).strftime("%Y%m%d-%H%M%S")
    candidate, n = root.with_name(f"{root.name}.old-{stamp}"), 1
    while candidate.exists():
        n += 1
        candidate = root.with_name(f"{root.name}.old-{stamp}-{n}")
    return candidate


def move_aside(root: Path) -> Path | None:
    """``--fresh``: move everything in ``root`` (but the lock its holder keeps) to :func:`aside_path`.

    Nothing is deleted, so finished work stays on disk; returns where it went, or None when ``root``
    held nothing.
    """
    children = [c for c in root.iterdir() if c.name != LOCK_FILE] if root.is_dir() else []
    if not children:
        return None
    target = aside_path(root)
    target.mkdir(parents=True)
    for child in children:
        child.rename(target / child.name)
    return target


def pending(items: list[BatchItem], journal: dict[str, str], *, retry_failed: bool) -> list[BatchItem]:
    """The requests still to run: not in the journal (id -> final status), or failed there when retried."""
    again = ("failed",) if retry_failed else ()
    return [item for item in items if item.id not in journal or journal[item.id] in again]


def damage(folder: Path) -> str | None:
    """Why the finished request in ``folder`` cannot be kept as it is on disk, or None when it can.

    Cheap (no image is decoded): its ``trace.json`` must parse and say the request finished, and every
    image file the trace lists (inputs, attempts, accepted and repaired images) must be there and not
    empty. A trace of a newer schema is not damage (nothing may rewrite it): None.
    """
    path = trace_path(folder)
    if not path.is_file():
        return f"{path} is missing"
    try:
        trace = load_trace(path)
    except TraceVersionError:
        return None
    except (OSError, ValueError) as exc:
        return f"{path} cannot be read ({failure_reason(exc)[:120]})"
    if not is_finished(trace):
        return f"{path} says the request is still {trace.status}"
    for name in sorted(_kept_images(trace)):
        image = image_path(folder, name)
        if not _non_empty(image):
            return f"{image} (listed in {path}) is missing or empty"
    return None


def _non_empty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def reopen_if_journaled_failed(
    folder: Path, status: object, damaged: str | None = None, error: object = None
) -> None:
    """A request the journal says failed runs again (``pending`` chose it), or one whose files are
    damaged (``damaged``, from :func:`damage`): reopen its folder. The reason its trace keeps is the
    trace's own error, else the journal's ``error`` (a full disk may have kept the trace from saying it)."""
    if damaged is not None:
        reopen_folder(folder, damaged)
    elif status == "failed":
        previous = read_trace(trace_path(folder))
        recorded = str(error) if error else None
        if previous is None:
            reopen_folder(folder, recorded or "unreadable trace")
        else:
            reopen_folder(folder, previous.error or recorded or "unknown")


def restore_pages(folder: Path, notice: str | None = None, trace: Trace | None = None) -> None:
    """Write the pages of a finished request again when a kill came before they were written."""
    if has_pages(folder):
        return
    trace = trace or read_trace(trace_path(folder))
    if trace is not None:
        write_documents(trace, folder, notice)


# --- one run folder --------------------------------------------------------------------------------------


def reopen_folder(folder: Path, reason: str) -> None:
    """Make the failed run in ``folder`` run again: keep its plan and good steps, or clear it."""
    trace = read_trace(trace_path(folder))
    inputs_gone = trace is not None and not all(_non_empty(image_path(folder, n)) for n in trace.input_images)
    if trace is None or trace.planner.plan is None or inputs_gone:  # nothing worth keeping
        for child in folder.iterdir() if folder.is_dir() else []:
            if child.name != LOCK_FILE:  # the lock of a `run` folder stays with its holder
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        return
    good = []
    for step in trace.steps:
        if not step.settled:
            break
        names = {a.image_file for a in step.attempts if a.image_file} | {step.accepted_image or ""}
        if not all(_non_empty(image_path(folder, name)) for name in names - {""}):
            break  # an image of the step is gone: the step runs again
        good.append(step)
    if trace.repair is not None and not all(_non_empty(image_path(folder, n)) for n in repair_images(trace)):
        trace.repair = None  # a repaired image is gone: the repair runs again
    trace.steps, trace.status, trace.error = good, "running", None
    trace.warnings.append(f"Run again after a failure: {one_line(reason)}")
    write_trace(folder, trace)


def reopen_if_failed(folder: Path) -> None:
    """``run --resume`` on a failed run runs it again, as a resumed batch does with its failed requests."""
    trace = read_trace(trace_path(folder))
    if trace is not None and trace.status == "failed":
        reopen_folder(folder, trace.error or "unknown")


def resume_recorder(out_dir: Path, request: Request) -> RunRecorder | None:
    """A recorder holding the trace and images already in ``out_dir``, or None when there is none."""
    remove_partial_writes(out_dir)  # a write interrupted by a crash; the rename never happened
    path = trace_path(out_dir)
    if not path.is_file():
        return None
    try:
        trace = load_trace(path)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InputError(
            f"{path} cannot be read ({failure_reason(exc)[:160]}); remove it to start the request over."
        ) from None
    if trace.request.text != request.text or trace.request.images != request.images:
        raise InputError(f"{path} holds a different request; use another output folder or remove it.")
    recorder = RunRecorder(trace, out_dir)
    keep = _kept_images(trace)
    for name in keep:
        recorder.images[name] = open_rgb(str(image_path(out_dir, name)))
    images = out_dir / IMAGES_DIR
    for stale in images.glob("*.png") if images.is_dir() else []:
        if stale.name not in keep:
            stale.unlink()  # an attempt of the step that was interrupted: it runs again
    return recorder


def _kept_images(trace: Trace) -> set[str]:
    """The images a resumed run keeps: the inputs, every image of a complete step and of a finished repair."""
    keep = set(trace.input_images) | repair_images(trace)
    for step in trace.steps:
        if step.complete:
            keep |= {a.image_file for a in step.attempts if a.image_file}
            keep |= {step.accepted_image} if step.accepted_image else set()
    return keep
