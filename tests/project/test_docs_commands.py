"""Every fenced command block in README.md and docs/*.md marked runnable on CPU runs as written.

A block is marked by the HTML comment ``<!-- runnable: cpu -->`` on the line right before its fence
(invisible on GitHub). Each marked block runs through bash (``set -euo pipefail``), or this venv's Python
for a ``python`` fence (the README's library example), in a fresh scratch
folder holding a copy of ``configs/``, with the isolated home of tests/conftest.py, the shared tiny model
cache and this venv's ``interleave-thinker`` first on PATH. See docs/testing.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

MARKER = "<!-- runnable: cpu -->"
FENCE = re.compile(r"^(`{3,})(.*)$")
BLOCK_TIMEOUT_S = 900
OUTPUT_TAIL = 6000


@dataclass(frozen=True)
class DocBlock:
    """One marked fenced block: where it is and its text."""

    path: Path
    line: int  # 1-based line of the opening fence
    text: str
    language: str = "bash"  # the fence's info string; "python" runs with this venv's Python

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"

    @property
    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, comment and blank lines dropped."""
        commands: list[str] = []
        pending = ""
        for raw in self.text.splitlines():
            line = raw.strip()
            if not pending and (not line or line.startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            commands.append(pending + line)
            pending = ""
        if pending:
            commands.append(pending.rstrip())
        return commands


def marked_blocks(text: str, path: Path) -> list[DocBlock]:
    """The fenced blocks of one Markdown text whose fence follows the runnable marker line."""
    lines = text.splitlines()
    blocks: list[DocBlock] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opening.group(1):
            end += 1
        if index > 0 and lines[index - 1].strip() == MARKER:
            language = opening.group(2).strip() or "bash"
            blocks.append(DocBlock(path, index + 1, "\n".join(lines[index + 1 : end]), language))
        index = end + 1
    return blocks


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def all_marked_blocks() -> list[DocBlock]:
    return [block for path in doc_files() for block in marked_blocks(path.read_text(encoding="utf-8"), path)]


BLOCKS = all_marked_blocks()


def test_collector_finds_marked_blocks_and_their_commands() -> None:
    assert len(BLOCKS) > 0
    for block in BLOCKS:
        assert block.commands, block.id
        assert all(command and not command.endswith("\\") for command in block.commands), block.id
        assert not any(command.startswith("make ") for command in block.commands), (
            f"{block.id}: make targets are not run"
        )


def test_collector_skips_unmarked_blocks_and_joins_continuations(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    text = "\n".join(
        [
            "```bash",
            "interleave-thinker run 'unmarked' --preset official",
            "```",
            "",
            MARKER,
            "```bash",
            "# a comment",
            "interleave-thinker batch --input p.jsonl \\",
            "    --out runs/x --preset tiny",
            "",
            "interleave-thinker report runs/x",
            "```",
            MARKER,
            "",
            "```bash",
            "echo 'marker not right before the fence'",
            "```",
        ]
    )
    blocks = marked_blocks(text, doc)
    assert [(block.line, block.commands) for block in blocks] == [
        (
            6,
            [
                "interleave-thinker batch --input p.jsonl --out runs/x --preset tiny",
                "interleave-thinker report runs/x",
            ],
        )
    ]


def test_collector_keeps_the_fence_language(tmp_path: Path) -> None:
    text = "\n".join([MARKER, "```python", "print('hi')", "```", MARKER, "```", "echo hi", "```"])
    blocks = marked_blocks(text, tmp_path / "doc.md")
    assert [(block.language, block.text) for block in blocks] == [
        ("python", "print('hi')"),
        ("bash", "echo hi"),
    ]


def scratch_env() -> dict[str, str]:
    """The test process's environment (the isolated home is already in it) with this venv's tools first."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "120"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_marked_block_runs_as_written(block: DocBlock, tmp_path: Path) -> None:
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    if block.language == "python":
        argv = [sys.executable, "-c", block.text + "\n"]
    else:
        argv = ["bash", "-c", "set -euo pipefail\n" + block.text + "\n"]
    try:
        done = subprocess.run(
            argv,
            cwd=tmp_path,
            env=scratch_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{block.id} did not finish in {BLOCK_TIMEOUT_S} s:\n{block.text}\n{exc.stdout!r}\n{exc.stderr!r}"
        )
    output = (done.stdout + done.stderr)[-OUTPUT_TAIL:]
    assert done.returncode == 0, (
        f"{block.id} exited {done.returncode}:\n{block.text}\n--- output (tail) ---\n{output}"
    )
