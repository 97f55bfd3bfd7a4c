"""The decisions of a restart, one by one (runtime/resume.py); whole resumed batches and runs are in
test_batch*.py and test_run_folder.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import LOCK_FILE, has_pages, read_trace, trace_path
from interleave_thinker.core.types import Request
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.resume import (
    merged_manifest,
    pending,
    reopen_folder,
    reopen_if_journaled_failed,
    restore_pages,
    resume_recorder,
)
from tests.helpers.runs import FIXTURE_PROMPT

ITEMS = [BatchItem(id=i, prompt=f"p {i}") for i in ("a", "b", "c", "d")]


def test_pending_skips_finished_requests_and_retries_failed_ones_unless_told_not_to() -> None:
    journal = {"a": "succeeded", "b": "failed", "x": "succeeded"}
    assert [i.id for i in pending(ITEMS, journal, retry_failed=True)] == ["b", "c", "d"]
    assert [i.id for i in pending(ITEMS, journal, retry_failed=False)] == ["c", "d"]
    assert pending(ITEMS, {}, retry_failed=False) == ITEMS


def test_a_batch_continues_only_with_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "batch.json"
    first = {"input": "in", "ids": ["a", "b"], "settings": {"planner": "x"}}
    assert merged_manifest(path, first, resume=False) == first  # a new folder
    path.write_text(json.dumps(first), encoding="utf-8")
    shard = {"input": "in", "ids": ["c", "a"], "settings": {"planner": "x"}}
    assert merged_manifest(path, shard, resume=True)["ids"] == ["a", "b", "c"]
    with pytest.raises(InputError, match="already holds a batch; use --resume"):
        merged_manifest(path, shard, resume=False)
    with pytest.raises(InputError, match="other settings"):
        merged_manifest(path, {**shard, "settings": {"planner": "y"}}, resume=True)


def test_a_failed_run_keeps_its_plan_and_complete_steps(v1_run: Path) -> None:
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    raw["steps"][1]["complete"] = False
    raw.update(status="failed", error="boom\nsecond line")
    trace_path(v1_run).write_text(json.dumps(raw), encoding="utf-8")
    reopen_if_journaled_failed(v1_run, "succeeded")  # not a failure in the journal: untouched
    assert json.loads(trace_path(v1_run).read_text(encoding="utf-8")) == raw
    reopen_if_journaled_failed(v1_run, "failed")
    trace = read_trace(trace_path(v1_run))
    assert trace is not None and trace.status == "running" and trace.error is None
    assert len(trace.steps) == 1 and trace.warnings == ["Run again after a failure: boom second line"]


def test_a_failed_run_without_a_plan_starts_over_but_keeps_its_lock(v1_run: Path) -> None:
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    raw["planner"]["plan"] = None
    trace_path(v1_run).write_text(json.dumps(raw), encoding="utf-8")
    (v1_run / LOCK_FILE).write_text("123\n")
    reopen_folder(v1_run, "no plan")
    assert [p.name for p in v1_run.iterdir()] == [LOCK_FILE]


def test_resume_drops_the_interrupted_step_and_refuses_another_request(v1_run: Path) -> None:
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    raw["steps"][1]["complete"] = False
    trace_path(v1_run).write_text(json.dumps(raw), encoding="utf-8")
    (v1_run / "images" / ".step02_attempt1.png.abc.tmp").write_bytes(b"half")
    recorder = resume_recorder(v1_run, Request(text=FIXTURE_PROMPT))
    assert recorder is not None and sorted(recorder.images) == ["step01_attempt0.png", "step01_attempt1.png"]
    assert sorted(p.name for p in (v1_run / "images").iterdir()) == sorted(recorder.images)
    with pytest.raises(InputError, match="holds a different request"):
        resume_recorder(v1_run, Request(text="Another request"))
    assert resume_recorder(v1_run.parent / "empty", Request(text=FIXTURE_PROMPT)) is None


def test_pages_are_written_again_only_when_missing(v1_run: Path) -> None:
    restore_pages(v1_run)
    assert has_pages(v1_run)
    (v1_run / "index.html").write_text("kept", encoding="utf-8")
    restore_pages(v1_run)
    assert (v1_run / "index.html").read_text(encoding="utf-8") == "kept"
    (v1_run / "document.md").unlink()
    trace_path(v1_run).unlink()
    restore_pages(v1_run)  # nothing to write them from: nothing written
    assert not (v1_run / "document.md").exists()
