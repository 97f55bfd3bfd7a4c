"""A stop of a scheduled command (issue 48, item 5): SIGTERM ends it at once with one line saying what was
kept and how to resume."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.helpers.common import REPO, sigterm_when

RELEASE = threading.Event()


def stuck(request: Request) -> Reply:
    """A server that answers health checks but no call (until the test ends): the batch stays in flight."""
    if request.method == "GET":
        return Reply(body={"status": "ok", "data": []})
    RELEASE.wait(60)
    return Reply(503, b"")


def test_sigterm_stops_a_batch_at_once_with_one_line_saying_what_is_kept(tmp_path: Path) -> None:
    RELEASE.clear()
    (tmp_path / "in.jsonl").write_text('{"id": "a", "prompt": "a cat"}\n')
    out = tmp_path / "out"
    with LocalServer(stuck) as server:
        spec = f"openai:{server.url}/v1#x"
        command = [
            sys.executable, "-m", "interleave_thinker", "batch", "--input", str(tmp_path / "in.jsonl"),
            "--out", str(out), "--planner", spec, "--critic", spec, "--generator", f"http:{server.url}", "--quiet",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "400"}
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        try:
            # batch.json is written after the stop handler is in place, before the models load
            stderr = sigterm_when(proc, out / "batch.json")
        finally:
            proc.kill()
            RELEASE.set()
            assert proc.stderr is not None
            proc.stderr.close()
    assert proc.returncode == 143, stderr
    lines = [line for line in stderr.splitlines() if "stopped by" in line]
    assert lines == [
        f"stopped by SIGTERM: 0 succeeded requests kept in {out} (an unfinished one resumes after its last "
        "complete step); run the same command again to resume."
    ]
    assert "Traceback" not in stderr


def test_the_preflight_asks_the_backends_the_run_will_call() -> None:
    from interleave_thinker.cli.scheduled import used_specs
    from interleave_thinker.core.config import PipelineConfig

    chat, edit, judge, review = "openai:http://a/v1#m", "http:http://g", "openai:http://j/v1#j", "gemini:r"
    cfg = PipelineConfig(planner=chat, critic=chat, generator=edit, judge=judge)
    assert used_specs(cfg) == {"planner": chat, "critic": chat, "generator": edit}
    assert used_specs(cfg, judge=True)["judge"] == judge  # data generate scores every attempt
    assert used_specs(cfg, agentic=False) == {"generator": edit}  # eval generate --mode base
    cfg.loop.select_best, cfg.loop.repair_budget, cfg.loop.repair_reviewer = "judge", 1, review
    assert used_specs(cfg) == {
        "planner": chat,
        "critic": chat,
        "generator": edit,
        "judge": judge,
        "review": review,
    }
