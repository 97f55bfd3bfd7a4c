"""A resume that trusts the disk, not only the journal (issue 48, items 1 and 2): a finished request
whose files are gone or damaged runs again, and a torn journal line is cut back before the next append."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.runtime.batch_inputs import BatchItem, read_batch_input
from interleave_thinker.runtime.resume import reopen_if_journaled_failed
from interleave_thinker.runtime.store import RunStore
from tests.helpers.batch import Switch, items_file, run_batch
from tests.helpers.common import TIMINGS, stable


def outputs(out: Path) -> tuple[Any, Any]:
    """results.json, and every request's trace without timings: two runs compare equal."""
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    traces = {
        p.parent.name: stable(json.loads(p.read_text(encoding="utf-8")), TIMINGS | {"created_at", "warnings"})
        for p in sorted((out / "requests").glob("*/trace.json"))
    }
    return results, traces


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[BatchItem], Path]:
    """One batch run through to the end, the reference every damaged-then-resumed run must equal."""
    root = tmp_path_factory.mktemp("undisturbed")
    items = read_batch_input(str(items_file(root)))
    out = root / "out"
    summary = run_batch(out, items, Switch({}))
    assert summary["requests"]["succeeded"] == 6
    return items, out


def delete_folder(folder: Path) -> str:
    shutil.rmtree(folder)
    return str(folder / "trace.json")


def truncate_trace(folder: Path) -> str:
    path = folder / "trace.json"
    text = path.read_bytes()
    path.write_bytes(text[: len(text) // 2])
    return str(path)


def delete_second_image(folder: Path) -> str:
    trace = json.loads((folder / "trace.json").read_text(encoding="utf-8"))
    image = folder / "images" / trace["steps"][1]["accepted_image"]
    image.unlink()
    return str(image)


@pytest.mark.parametrize(
    "harm", [delete_folder, truncate_trace, delete_second_image], ids=["deleted", "truncated", "image-gone"]
)
def test_a_finished_request_whose_files_are_damaged_runs_again(
    undisturbed: tuple[list[BatchItem], Path],
    tmp_path: Path,
    harm: Callable[[Path], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    items, reference = undisturbed
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    named = harm(out / "requests" / "ok3")
    with caplog.at_level(logging.WARNING, logger="interleave_thinker.runtime.store"):
        summary = run_batch(out, items, Switch({}))
    warnings = [r.getMessage() for r in caplog.records if "finished earlier" in r.getMessage()]
    assert len(warnings) == 1 and named in warnings[0] and "ok3" in warnings[0]
    assert summary["requests"] == {"total": 6, "succeeded": 6, "failed": 0, "unfinished": 0}
    assert outputs(out) == outputs(reference)
    caplog.clear()  # the next resume trusts the rerun: nothing to warn about, nothing run
    assert RunStore(out).finished() == {i.id: "succeeded" for i in items}
    assert not caplog.records


def test_a_torn_journal_line_is_cut_back_before_the_next_append(
    undisturbed: tuple[list[BatchItem], Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    items, reference = undisturbed
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    journal = out / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    torn = lines[-1][:9]  # a crash during the last append: '{"id": "o'
    journal.write_bytes(b"".join(lines[:-1]) + torn)
    torn_id = json.loads(lines[-1])["id"]
    with caplog.at_level(logging.WARNING, logger="interleave_thinker.runtime.store"):
        summary = run_batch(out, items, Switch({}))
    cut = [r.getMessage() for r in caplog.records if "torn last line" in r.getMessage()]
    assert len(cut) == 1 and f"cut {len(torn)} bytes" in cut[0] and str(journal) in cut[0]
    assert summary["requests"] == {"total": 6, "succeeded": 6, "failed": 0, "unfinished": 0}
    rows = [json.loads(line) for line in journal.read_bytes().splitlines()]  # every line parses
    assert [r["id"] for r in rows] == [json.loads(line)["id"] for line in lines]
    assert rows[-1] == {"id": torn_id, "status": "succeeded"}
    assert outputs(out) == outputs(reference)


def test_a_journaled_failure_the_trace_never_heard_of_keeps_the_journals_error(
    undisturbed: tuple[list[BatchItem], Path], tmp_path: Path
) -> None:
    """A full disk: the journal got the error, the trace stayed 'running'; the rerun's warning says why."""
    folder = tmp_path / "ok3"
    shutil.copytree(undisturbed[1] / "requests" / "ok3", folder)
    trace = json.loads((folder / "trace.json").read_text(encoding="utf-8"))
    trace["status"], trace["error"] = "running", None
    (folder / "trace.json").write_text(json.dumps(trace), encoding="utf-8")
    error = "OSError: [Errno 28] No space left on device"
    reopen_if_journaled_failed(folder, "failed", None, error)
    warnings = json.loads((folder / "trace.json").read_text(encoding="utf-8"))["warnings"]
    assert warnings[-1] == f"Run again after a failure: {error}"
