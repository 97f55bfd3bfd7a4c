"""Symbolic links planted in a batch's ``--out`` are never written through (issue 30, item 15).

A real batch (the CLI in a fresh interpreter) against the scripted model servers of ``test_batch``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.runtime.store import RunStore
from tests.helpers.batch import batch_command
from tests.helpers.common import REPO, write


def outside(path: Path) -> Path:
    """A folder outside ``--out`` holding one file of its own, which must stay as it is."""
    path.mkdir(parents=True)
    (path / "keep.txt").write_text("mine")
    return path


def listing(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() if p.is_file() else "<folder>" for p in folder.iterdir()}


def test_a_batch_writes_nothing_through_links_planted_in_out(servers: dict[str, str], tmp_path: Path) -> None:
    inputs = write(
        tmp_path / "in.jsonl",
        "".join(json.dumps({"id": f"r{i}", "prompt": f"Show process number {i}"}) + "\n" for i in (1, 2, 3)),
    )
    out = tmp_path / "out"
    away, pictures = outside(tmp_path / "away"), outside(tmp_path / "pictures")
    (out / "requests" / "r2").mkdir(parents=True)
    (out / "requests" / "r1").symlink_to(away, target_is_directory=True)  # a whole request folder
    (out / "requests" / "r2" / "images").symlink_to(pictures, target_is_directory=True)  # its images
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    done = subprocess.run(
        batch_command(servers, inputs, out), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # Nothing was written (or cleared) outside --out.
    assert listing(away) == {"keep.txt": "mine"} and listing(pictures) == {"keep.txt": "mine"}
    # The two requests failed alone, each with a one-line reason naming the link; the third succeeded.
    journal = {e["id"]: e for e in map(json.loads, (out / "journal.jsonl").read_text().splitlines())}
    assert journal["r3"]["status"] == "succeeded"
    for request_id in ("r1", "r2"):
        assert journal[request_id]["status"] == "failed"
        assert (
            "is a symbolic link to" in journal[request_id]["error"]
            and "\n" not in journal[request_id]["error"]
        )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["succeeded"] == 1 and summary["requests"]["failed"] == 2
    # A resume changes nothing outside either.
    again = subprocess.run(
        batch_command(servers, inputs, out), env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert listing(away) == {"keep.txt": "mine"} and listing(pictures) == {"keep.txt": "mine"}


def test_a_planted_journal_or_lock_link_is_refused_with_one_line(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "journal.jsonl").symlink_to(victim)
    with pytest.raises(InputError, match=r"journal.jsonl is a symbolic link"):
        RunStore(out).open({"ids": []}, resume=True)
    (out / "journal.jsonl").unlink()
    (out / ".lock").symlink_to(victim)
    from interleave_thinker.runtime.outlock import folder_lock

    with pytest.raises(InputError, match=r"\.lock is a symbolic link"), folder_lock(out):
        pass
    assert victim.read_text() == "mine"


def test_write_atomic_below_a_confined_folder_refuses_a_link_out_but_not_one_inside(tmp_path: Path) -> None:
    from interleave_thinker.core.paths import confine

    root, away = tmp_path / "root", outside(tmp_path / "away")
    (root / "inner").mkdir(parents=True)
    (root / "out_link").symlink_to(away, target_is_directory=True)
    (root / "in_link").symlink_to(root / "inner", target_is_directory=True)
    confine(root)
    with pytest.raises(InputError, match="outside the output folder"):
        write_atomic(root / "out_link" / "new" / "f.txt", "x")
    write_atomic(root / "in_link" / "f.txt", "ok")
    assert (root / "inner" / "f.txt").read_text() == "ok" and listing(away) == {"keep.txt": "mine"}
    # The file's own name being a link: the link is replaced, its target is left alone.
    (root / "file_link").symlink_to(away / "keep.txt")
    write_atomic(root / "file_link", "new")
    assert (root / "file_link").read_text() == "new" and not (root / "file_link").is_symlink()
    assert listing(away) == {"keep.txt": "mine"}
