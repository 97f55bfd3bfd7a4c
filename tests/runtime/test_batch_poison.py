"""One poisoned request among many: the others finish, it is recorded as failed with a one-line reason,
and a resumed batch runs it again (issue 16, items 1, 8, 12, 14, 16, 17)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.core.errors import BackendError
from interleave_thinker.runtime import recorder, scheduler
from interleave_thinker.runtime.batch_inputs import read_batch_input
from interleave_thinker.runtime.store import RunStore
from tests.helpers.batch import PLAN, Switch, items_file, run_batch


def assert_poisoned(out: Path, summary: dict[str, Any], poisoned_id: str, needle: str) -> None:
    assert summary["requests"] == {"total": 6, "succeeded": 5, "failed": 1, "unfinished": 0}
    journal = RunStore(out).journal()
    assert journal[poisoned_id]["status"] == "failed"
    reason = journal[poisoned_id]["error"]
    assert needle in reason and "\n" not in reason and len(reason) <= 300
    assert all(journal[f"ok{i}"]["status"] == "succeeded" for i in range(5))
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [r["id"] for r in results] == ["ok0", "ok1", poisoned_id, "ok2", "ok3", "ok4"]
    assert any(needle in key for key in summary["failure_reasons"])


@pytest.mark.parametrize(
    ("poison", "needle"),
    [
        # A bug-like exception whose message holds a lone surrogate and a NUL (cannot be stored as is).
        ({"generate": RuntimeError("broken \ud800 reply\x00" + "x" * 5000)}, "RuntimeError: broken"),
        # What an uncapped `Retry-After: inf` raised inside a served backend.
        ({"generate": OverflowError("cannot convert float infinity to integer")}, "OverflowError"),
        # A 5,000-digit step_number, every time the planner is asked.
        ({"plan": PLAN.replace("'step_number': 1", "'step_number': " + "9" * 5000)}, "no valid plan"),
    ],
    ids=["surrogate-exception", "retry-after-inf", "huge-step-number"],
)
def test_poisoned_request_fails_alone_and_resume_retries_it(
    tmp_path: Path, poison: dict[str, Any], needle: str
) -> None:
    items = read_batch_input(str(items_file(tmp_path)))
    switch = Switch(poison)
    out = tmp_path / "out"
    assert_poisoned(out, run_batch(out, items, switch), "p", needle)
    assert "Show the POISON" in (out / "report.html").read_text(encoding="utf-8")

    # --no-retry-failed keeps it failed; the default runs it again (the backend is healed by now).
    switch.fixed = True
    assert run_batch(out, items, switch, retry_failed=False)["requests"]["failed"] == 1
    summary = run_batch(out, items, switch)
    assert summary["requests"] == {"total": 6, "succeeded": 6, "failed": 0, "unfinished": 0}
    trace = json.loads((out / "requests" / "p" / "trace.json").read_text(encoding="utf-8"))
    assert trace["status"] == "succeeded" and len(trace["steps"]) == 2


def test_lone_surrogate_reply_never_stops_the_batch(tmp_path: Path) -> None:
    bad = PLAN.replace("PROMPT one", "poisoned \ud83d cut emoji")
    items = read_batch_input(str(items_file(tmp_path)))
    summary = run_batch(tmp_path / "out", items, Switch({"plan": bad}))
    assert summary["requests"]["succeeded"] >= 5 and summary["requests"]["unfinished"] == 0
    text = (tmp_path / "out" / "requests" / "p" / "trace.json").read_text(encoding="utf-8")
    assert "\\ud83d" not in text  # whatever was stored is valid UTF-8 JSON


@pytest.mark.parametrize(
    ("poisoned_id", "needle"),
    [("bad\x00id", "control characters"), ("x" * 300, "longer than 200 bytes"), ("../up", "is a path")],
)
def test_id_that_cannot_be_a_folder_fails_alone(tmp_path: Path, poisoned_id: str, needle: str) -> None:
    items = read_batch_input(str(items_file(tmp_path, poisoned_id)))
    out = tmp_path / "out"
    summary = run_batch(out, items, Switch({}))
    assert_poisoned(out, summary, poisoned_id, needle)
    assert sorted(p.name for p in (out / "requests").iterdir()) == [f"ok{i}" for i in range(5)]
    summary = run_batch(out, items, Switch({}))  # retried, and refused again for the same reason
    assert summary["requests"]["failed"] == 1


def test_full_disk_for_one_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = recorder.write_atomic

    def full_for_p(path: Path, data: bytes | str) -> None:
        if "/requests/p/" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    for module in (recorder, scheduler):
        monkeypatch.setattr(module, "write_atomic", full_for_p)
    items = read_batch_input(str(items_file(tmp_path)))
    out = tmp_path / "out"
    assert_poisoned(out, run_batch(out, items, Switch({})), "p", "No space left on device")
    monkeypatch.undo()
    assert run_batch(out, items, Switch({}))["requests"]["succeeded"] == 6


def test_corrupted_trace_on_resume(tmp_path: Path) -> None:
    items = read_batch_input(str(items_file(tmp_path)))
    out = tmp_path / "out"
    (out / "requests" / "p").mkdir(parents=True)
    (out / "requests" / "p" / "trace.json").write_text('{"schema_version": 1, "request": {', encoding="utf-8")
    assert_poisoned(out, run_batch(out, items, Switch({})), "p", "trace.json cannot be read")
    assert run_batch(out, items, Switch({}))["requests"]["succeeded"] == 6


def test_backend_errors_are_said_in_trace_and_summary(tmp_path: Path) -> None:
    items = read_batch_input(str(items_file(tmp_path)))
    switch = Switch({"generate": BackendError("edit service: 503 after 3 tries")})
    summary = run_batch(tmp_path / "out", items, switch)
    # Every attempt of step 1 failed: the request fails, and its three backend errors are counted.
    assert summary["backend_errors"] == {
        "requests": 1,
        "succeeded_requests": 0,
        "calls": {"generator": 3},
        "ids": ["p"],
    }
    trace = json.loads((tmp_path / "out" / "requests" / "p" / "trace.json").read_text(encoding="utf-8"))
    assert any(w.startswith("Backend errors during this request: generator 3") for w in trace["warnings"])
