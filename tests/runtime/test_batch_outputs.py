"""Output folders: one process at a time, pages restored on resume, umask, encoded links, accumulated
figures, merged shards, and the `run` command's resume and one-line errors (issue 16, items 9, 12, 14-16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from interleave_thinker.cli.batch import in_order
from interleave_thinker.core.errors import InputError
from interleave_thinker.runtime.outlock import folder_lock
from interleave_thinker.runtime.reports import accumulate, render_report, summarize
from interleave_thinker.runtime.store import RunStore, failed_trace
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.helpers.batch import Switch, items_file, run_batch
from tests.helpers.common import REPO, sigterm_when, stable

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from interleave_thinker.runtime.outlock import folder_lock
    with folder_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(60)
    """
)


def python(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=120, **kwargs
    )  # type: ignore[call-overload]


def test_a_live_holder_blocks_and_a_dead_one_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        busy = rf"in use by another interleave-thinker process \(pid {holder.pid}\)"
        with pytest.raises(InputError, match=busy), folder_lock(out):
            pass
        # The same through the command line: exit 2 with the message, before any model loads.
        (tmp_path / "in.jsonl").write_text('{"prompt": "a"}\n', encoding="utf-8")
        blocked = python(
            "-m", "interleave_thinker", "batch", "--input", str(tmp_path / "in.jsonl"), "--out", str(out),
            "--planner", "openai:http://127.0.0.1:9/v1#x", "--critic", "openai:http://127.0.0.1:9/v1#x",
            "--generator", "http:http://127.0.0.1:9",
        )  # fmt: skip
        assert blocked.returncode == 2 and "in use by another" in blocked.stderr
        assert not (out / "batch.json").exists()
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    with folder_lock(out):  # the dead holder's lock is taken over
        assert (out / ".lock").read_text().strip() == str(os.getpid())


def test_resume_restores_missing_pages_and_umask_is_honoured(tmp_path: Path) -> None:
    items_path = items_file(tmp_path)
    from interleave_thinker.runtime.batch_inputs import read_batch_input

    items = read_batch_input(str(items_path))
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        run_batch(out, items, Switch({}))
    finally:
        os.umask(old)
    trace = out / "requests" / "ok1" / "trace.json"
    assert trace.stat().st_mode & 0o777 == 0o644
    assert (out / "summary.json").stat().st_mode & 0o777 == 0o644
    # Killed after the final trace write, before the pages: journaled or not, a resume writes them again.
    for name in ("index.html", "document.md"):
        (out / "requests" / "ok1" / name).unlink()
        (out / "requests" / "ok3" / name).unlink()
    journal = out / "journal.jsonl"
    journal.write_text(
        "".join(line + "\n" for line in journal.read_text().splitlines() if '"ok3"' not in line)
    )
    run_batch(out, items, Switch({}))
    for request in ("ok1", "ok3"):
        assert "Show process" in (out / "requests" / request / "index.html").read_text(encoding="utf-8")
        assert (out / "requests" / request / "document.md").is_file()


def test_report_links_are_percent_encoded() -> None:
    traces = {"a#b?c%d e": failed_trace("a#b?c%d e", "x", "boom")}
    page = render_report(traces, summarize(traces))
    assert 'href="requests/a%23b%3Fc%25d%20e/index.html"' in page


def test_a_resume_adds_to_the_first_runs_figures() -> None:
    first = accumulate(None, {"generator": {"calls": 10, "batched_calls": 0, "limit": 2}}, 30.0)
    summary = {"wall_s": first["wall_s"], "backends": first["backends"], "runs": first["runs"]}
    second = accumulate(summary, {"generator": {"calls": 4, "batched_calls": 1, "limit": 2}}, 5.0)
    assert second["wall_s"] == 35.0
    assert second["backends"]["generator"]["calls"] == 14
    assert second["backends"]["generator"]["batched_calls"] == 1
    assert [r["wall_s"] for r in second["runs"]] == [30.0, 5.0]
    assert second["runs"][0]["backends"]["generator"]["calls"] == 10  # the first run's figures kept
    legacy = accumulate({"wall_s": 12.0, "backends": {}}, {}, 1.0)  # a summary from before "runs"
    assert legacy["wall_s"] == 13.0


def test_shards_merged_into_one_folder_keep_every_id(tmp_path: Path) -> None:
    out = tmp_path / "out"
    store = RunStore(out)
    for shard in ("s0", "s1"):  # two machines wrote into one folder; the last manifest names only its ids
        (out / "requests" / shard).mkdir(parents=True)
        trace = failed_trace(shard, f"prompt {shard}", "boom")
        (out / "requests" / shard / "trace.json").write_text(trace.model_dump_json(), encoding="utf-8")
    (out / "batch.json").write_text(json.dumps({"ids": ["s1"], "settings": {}}), encoding="utf-8")
    assert list(in_order(store.traces(), store.manifest()["ids"])) == ["s1", "s0"]
    rebuilt = python("-m", "interleave_thinker", "report", str(out))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert [r["id"] for r in json.loads((out / "results.json").read_text())] == ["s1", "s0"]


@pytest.mark.parametrize("device", ["gpu", "cuda:7"])
def test_bad_device_is_a_one_line_usage_error(tmp_path: Path, device: str) -> None:
    result = python(
        "-m", "interleave_thinker", "run", "Draw a cat", "--preset", "tiny", "--device", device,
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and f"--device {device}" in result.stderr
    assert not (tmp_path / "run").exists()


def test_unexpected_exception_is_one_line(tmp_path: Path) -> None:
    code = (
        "import sys; from interleave_thinker.cli import main as m\n"
        "def boom(*a, **k): raise RuntimeError('deep inside a library')\n"
        "m.app = boom; sys.argv = ['interleave-thinker']; m.main()\n"
    )
    result = python("-c", code)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "RuntimeError: deep inside a library" in result.stderr


def test_literal_eval_warnings_are_silenced_by_the_cli() -> None:
    # train/rewards/critic.py reads replies with ast.literal_eval (`reward` command); "\\d" in a reply warns.
    parse = "import ast; ast.literal_eval(" + repr("'a \\d'") + ")\n"
    setup = (
        "import sys; from interleave_thinker.cli import main as m\n"
        "m.app = lambda: None; sys.argv = ['interleave-thinker']; m.main()\n"
    )
    bare = python("-W", "always", "-c", parse)
    assert "invalid escape sequence" in bare.stderr  # the warning exists without the CLI's filter
    quiet = python("-W", "always", "-c", setup + parse)
    assert quiet.returncode == 0 and "invalid escape sequence" not in quiet.stderr, quiet.stderr


@pytest.fixture
def run_command(servers: dict[str, str]) -> Iterator[list[str]]:
    yield [
        "-m", "interleave_thinker", "run", "Show process number 3", "--preset", "tiny",
        "--planner", f"openai:{servers['chat']}/v1#scripted", "--critic", f"openai:{servers['chat']}/v1#scripted",
        "--generator", f"http:{servers['edit']}",
    ]  # fmt: skip


@pytest.mark.slow
def test_an_interrupted_run_continues_with_resume(run_command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = python(*run_command, "--out", str(out))
    assert first.returncode == 0, first.stderr
    complete = json.loads((out / "trace.json").read_text())
    # As a kill leaves it: the last step unfinished, a stray temporary file, no pages yet.
    interrupted = dict(complete, status="running", steps=complete["steps"][:-1])
    (out / "trace.json").write_text(json.dumps(interrupted))
    (out / "images" / ".step09_attempt0.png.x1.tmp").write_bytes(b"half")
    (out / "index.html").unlink()
    again = python(*run_command, "--out", str(out))
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = python(*run_command, "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((out / "trace.json").read_text())
    assert final["status"] == "succeeded" and stable(final["steps"]) == stable(complete["steps"])
    assert (out / "index.html").is_file() and not list(out.rglob("*.tmp"))


def test_report_merges_shard_folders(tmp_path: Path) -> None:
    from interleave_thinker.runtime.batch_inputs import read_batch_input, select

    items = read_batch_input(str(items_file(tmp_path)))
    for index in (0, 1):
        run_batch(tmp_path / f"shard{index}", select(items, shard=(index, 2)), Switch({}))
    merged = tmp_path / "merged"
    result = python(
        "-m", "interleave_thinker", "report", str(tmp_path / "shard0"), str(tmp_path / "shard1"),
        "--out", str(merged),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = json.loads((merged / "results.json").read_text(encoding="utf-8"))
    assert sorted(r["id"] for r in rows) == sorted(i.id for i in items)
    assert all((merged / path).is_file() for r in rows for path in r["image_answer"])
    assert json.loads((merged / "summary.json").read_text())["requests"]["total"] == 6
    assert 'href="../shard1/requests/ok1/index.html"' in (merged / "report.html").read_text()


def test_run_resume_of_a_failed_run_keeps_the_plan_and_runs_it_again(tmp_path: Path) -> None:
    from interleave_thinker.core.errors import BackendError
    from interleave_thinker.core.run_folder import read_trace
    from interleave_thinker.runtime.batch_inputs import read_batch_input
    from interleave_thinker.runtime.resume import reopen_if_failed

    items = read_batch_input(str(items_file(tmp_path)))
    run_batch(tmp_path / "out", items, Switch({"generate": BackendError("down")}))
    folder = tmp_path / "out" / "requests" / "p"
    before = read_trace(folder / "trace.json")
    assert before is not None and before.status == "failed" and before.planner.plan is not None
    reopen_if_failed(folder)
    after = read_trace(folder / "trace.json")
    assert after is not None and after.status == "running" and after.error is None
    assert after.planner == before.planner and after.steps == []  # step 1 had no image: it runs again
    assert after.warnings[-1].startswith("Run again after a failure: Step 1 produced no image")


RELEASE = threading.Event()


def stuck_edit(request: Request) -> Reply:
    """An "/edit" server that answers health checks but never finishes an edit (until the test ends)."""
    if request.method == "GET":
        return Reply(body={"status": "ok"})
    RELEASE.wait(60)
    return Reply(503, b"")


@pytest.mark.slow
def test_sigterm_leaves_a_resumable_run_without_temporary_files(
    servers: dict[str, str],
    tmp_path: Path,
) -> None:
    RELEASE.clear()
    stuck = LocalServer(stuck_edit).start()
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "interleave_thinker", "run", "Show process number 3", "--preset", "tiny",
        "--planner", f"openai:{servers['chat']}/v1#scripted", "--critic", f"openai:{servers['chat']}/v1#scripted",
        "--generator", f"http:{stuck.url}", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True
    )
    try:
        stderr = sigterm_when(proc, out / "trace.json")
    finally:
        proc.kill()
        assert proc.stderr is not None
        proc.stderr.close()
        RELEASE.set()
        stuck.close()
    assert proc.returncode == 130, stderr  # typer reports the interrupt itself, without a traceback
    assert "Traceback" not in stderr
    trace = json.loads((out / "trace.json").read_text())
    assert trace["status"] == "running" and trace["planner"]["plan"] is not None
    assert not list(out.rglob("*.tmp")) and not list(out.rglob("step*.png"))
