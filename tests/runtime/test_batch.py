"""Batch inputs, sharding, and crash-safe resume of a batch killed with SIGKILL at several points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from interleave_thinker.core.errors import InputError
from interleave_thinker.runtime import batch_inputs
from interleave_thinker.runtime.batch_inputs import parse_shard, read_batch_input, select
from tests.helpers.batch import batch_command
from tests.helpers.common import REPO, stable, write


def test_jsonl_with_aliases_and_generated_ids(tmp_path: Path) -> None:
    path = write(
        tmp_path / "in.jsonl",
        '{"id": "x", "prompt": "a", "images": ["i.png"], "task": "t"}\n\n{"user_input": "b"}\n{"instruction": "c"}\n{"Prompt": "d"}\n',
    )
    items = read_batch_input(str(path))
    assert [(i.id, i.prompt, i.task) for i in items] == [
        ("x", "a", "t"),
        ("item-00002", "b", None),
        ("item-00003", "c", None),
        ("item-00004", "d", None),
    ]
    assert items[0].images == (str(tmp_path / "i.png"),)
    assert items[1].where == f"{path}:3"


def test_json_csv_parquet(tmp_path: Path) -> None:
    rows = [{"id": "1", "prompt": "a", "images": "x.png;y.png"}, {"id": "2", "prompt": "b", "images": ""}]
    json_items = read_batch_input(str(write(tmp_path / "in.json", json.dumps(rows))))
    csv_items = read_batch_input(str(write(tmp_path / "in.csv", "id,prompt,images\n1,a,x.png;y.png\n2,b,\n")))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    parquet_items = read_batch_input(str(tmp_path / "in.parquet"))
    for items in (json_items, csv_items, parquet_items):
        assert [(i.id, i.prompt, len(i.images)) for i in items] == [("1", "a", 2), ("2", "b", 0)]
    assert csv_items[1].where.endswith("in.csv:3")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "in.jsonl",
            '{"prompt": "a"}\n{"images": []}\n',
            "in.jsonl:2: prompt: missing (also accepted: user_input, instruction, Prompt).",
        ),
        ("in.jsonl", '{"prompt": "a"}\n{"prompt": "b"\n', "in.jsonl:2: not valid JSON"),
        (
            "in.jsonl",
            '{"id": "q", "prompt": "a"}\n{"id": "z", "prompt": "b"}\n{"id": "q", "prompt": "c"}\n',
            "in.jsonl:3: id: 'q' already used at",
        ),
        ("in.csv", "id,prompt\n1,a\n2,\n", "in.csv:3: prompt: missing"),
        ("in.json", '{"prompt": "a"}', "in.json: must hold a JSON list of records."),
        ("in.txt", "a", "unknown input format '.txt'"),
        ("in.jsonl", '{"id": 1' + "0" * 5000 + ', "prompt": "a"}\n', "in.jsonl:1: Exceeds the limit"),
    ],
)
def test_input_errors_name_line_and_field(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        read_batch_input(str(write(tmp_path / name, text)))
    assert message in str(info.value)


def test_hf_dataset_offline_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="must already be in the Hugging Face cache"):
        read_batch_input("hf:zlab-princeton/UEval-does-not-exist:test")


def test_hf_input_without_the_datasets_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails as when not installed
    with pytest.raises(InputError, match=r"need the `datasets` package \(`pip install datasets`\)"):
        read_batch_input("hf:zlab-princeton/UEval:test")


def test_hf_input_whose_loader_lacks_a_package_names_that_package(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(name: str, split: str | None) -> None:
        raise ModuleNotFoundError("No module named 'zstandard'", name="zstandard")

    monkeypatch.setattr(batch_inputs, "load_hf_dataset", load)
    with pytest.raises(InputError) as info:
        read_batch_input("hf:zlab-princeton/UEval:test")
    assert "needs the package `zstandard`" in str(info.value) and "pip install zstandard" in str(info.value)
    assert "datasets" not in str(info.value) and "Offline" not in str(info.value)


def test_shards_partition_and_limit(tmp_path: Path) -> None:
    items = read_batch_input(
        str(write(tmp_path / "in.jsonl", "".join(f'{{"prompt": "p{i}"}}\n' for i in range(10))))
    )
    shards = [select(items, shard=(i, 3)) for i in range(3)]
    ids = [item.id for shard in shards for item in shard]
    assert sorted(ids) == sorted(i.id for i in items) and len(ids) == len(set(ids))
    assert [i.prompt for i in select(items, limit=4)] == ["p0", "p1", "p2", "p3"]
    assert [i.prompt for i in select(items, limit=4, shard=(1, 2))] == ["p1", "p3"]
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "a/2", "1", "-1/2"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)


# --- crash-safe resume against real HTTP servers ------------------------------------------------------------


def log(url: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{url}/log", timeout=10).json())


def traces(out: Path) -> dict[str, Any]:
    return {
        p.parent.name: stable(json.loads(p.read_text()))
        for p in sorted((out / "requests").glob("*/trace.json"))
    }


def finished_work(out: Path) -> tuple[set[str], set[tuple[str, int]]]:
    """Requests with a plan on disk, and the (prompt, seed) of every attempt of a complete step."""
    planned, done = set(), set()
    for path in (out / "requests").glob("*/trace.json"):
        trace = json.loads(path.read_text())
        if trace["planner"]["plan"] is not None:
            planned.add(trace["request"]["text"])
        for step in trace["steps"]:
            if step["complete"]:
                done |= {(a["prompt"], a["seed"]) for a in step["attempts"]}
    return planned, done


@pytest.mark.slow
def test_sigkill_at_several_points_then_resume_equals_uninterrupted(
    servers: dict[str, str], tmp_path: Path
) -> None:
    inputs = write(
        tmp_path / "in.jsonl",
        "".join(
            json.dumps({"id": f"r{i:02d}", "prompt": f"Show process number {i}", "task": f"t{i % 3}"}) + "\n"
            for i in range(24)
        ),
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    # The reference: one uninterrupted run.
    reference = tmp_path / "reference"
    start = len(log(servers["edit"]))
    subprocess.run(
        batch_command(servers, inputs, reference), env=env, check=True, capture_output=True, timeout=300
    )
    reference_calls = len(log(servers["edit"])) - start

    # The same batch, killed with SIGKILL after several amounts of generator work, then resumed to the end.
    out = tmp_path / "killed"
    killed_at: list[int] = []
    gen_before = len(log(servers["edit"]))
    for threshold in (3, 20, 45):
        planned, done = finished_work(out) if out.exists() else (set(), set())
        mark_chat, mark_gen = len(log(servers["chat"])), len(log(servers["edit"]))
        proc = subprocess.Popen(
            batch_command(servers, inputs, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        while len(log(servers["edit"])) - mark_gen < threshold and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at.append(len(log(servers["edit"])) - mark_gen)
        # Work finished before this run started was never redone by it.
        redone_gen = [c for c in log(servers["edit"])[mark_gen:] if (c["prompt"], c["seed"]) in done]
        redone_plans = [
            c for c in log(servers["chat"])[mark_chat:] if c["role"] == "planner" and c["key"] in planned
        ]
        assert redone_gen == [] and redone_plans == []
    planned, done = finished_work(out)
    mark_chat, mark_gen = len(log(servers["chat"])), len(log(servers["edit"]))
    final = subprocess.run(
        batch_command(servers, inputs, out), env=env, capture_output=True, text=True, timeout=300
    )
    assert final.returncode == 0, final.stderr
    assert not [c for c in log(servers["edit"])[mark_gen:] if (c["prompt"], c["seed"]) in done]
    assert not [c for c in log(servers["chat"])[mark_chat:] if c["role"] == "planner" and c["key"] in planned]

    assert killed_at[0] >= 3 and len(done) > 0  # the kills did land mid-batch, after real work
    assert json.loads((out / "results.json").read_text()) == json.loads(
        (reference / "results.json").read_text()
    )
    assert traces(out) == traces(reference) and len(traces(out)) == 24
    assert sorted(p.name for p in (out / "requests" / "r05" / "images").iterdir()) == sorted(
        p.name for p in (reference / "requests" / "r05" / "images").iterdir()
    )
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*.tmp"))
    total_gen = len(log(servers["edit"])) - gen_before
    # Only calls in flight at a kill (or in the step it interrupted) are repeated.
    assert total_gen - reference_calls <= 3 * 4 * 3, (total_gen, reference_calls)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 24, "succeeded": 24, "failed": 0, "unfinished": 0}
    report = (out / "report.html").read_text()
    assert report.count('class="card"') == 24 and 'data-task="t1"' in report

    # `report` rebuilds the outputs from the traces alone.
    results = (out / "results.json").read_text()
    for name in ("summary.json", "results.json", "report.html"):
        (out / name).unlink()
    rebuilt = subprocess.run(
        [sys.executable, "-m", "interleave_thinker", "report", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (out / "results.json").read_text() == results
    assert json.loads((out / "summary.json").read_text())["success_rate"] == 1.0
