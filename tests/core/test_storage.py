"""Storage faults through the command line (issue 48, item 4): errno -> exit code and one line naming the
path and the fix, a bad --out found before any model is loaded, an unreadable batch.json offering --fresh."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from interleave_thinker.cli.main import main

REFUSED = "a model was loaded"


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``interleave-thinker ARGS`` in this process: the exit code and stderr as one line of words."""
    monkeypatch.setattr(sys, "argv", ["interleave-thinker", *args])
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0), " ".join(capsys.readouterr().err.split())


def batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, out: Path
) -> tuple[int, str]:
    """``batch`` of ``tmp_path/in.jsonl`` into ``out`` with served backends nobody answers on."""
    spec = "openai:http://127.0.0.1:9/v1#x"
    return cli(
        monkeypatch, capsys, "batch", "--input", str(tmp_path / "in.jsonl"), "--out", str(out),
        "--planner", spec, "--critic", spec, "--generator", "http:http://127.0.0.1:9",
    )  # fmt: skip


def failing_mkdir(code: int, under: Path) -> Callable[..., None]:
    """``os.mkdir`` failing with ``code`` below ``under`` (a full or read-only disk, no permission: the
    tests run as root on a roomy disk, so the errno is injected where the folder is made)."""
    make = os.mkdir

    def mkdir(path: os.PathLike[str] | str, *args: object, **kwargs: object) -> None:
        if str(path).startswith(str(under)):
            raise OSError(code, os.strerror(code), str(path))
        make(path, *args, **kwargs)  # type: ignore[arg-type]

    return mkdir


def file(path: Path) -> Path:
    path.write_text("")
    return path


# name -> (set-up of tmp_path returning the --out, errno injected at mkdir or None, exit code, words)
CASES: dict[str, tuple[Callable[[Path], Path], int | None, int, tuple[str, ...]]] = {
    "EEXIST": (lambda t: file(t / "out"), None, 2, ("a file exists where a folder is needed",)),
    "ENOTDIR": (lambda t: file(t / "file") / "out", None, 2, ("a file stands where a folder",)),
    "EACCES": (lambda t: t / "out", errno.EACCES, 2, ("permission denied", "choose a folder you may write to")),
    "EROFS": (lambda t: t / "out", errno.EROFS, 2, ("read-only file system", "writable file system")),
    "ENOSPC": (lambda t: t / "out", errno.ENOSPC, 1, ("no space left on the device", "run the same command again")),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_storage_faults_of_batch_out_are_one_line_with_the_path_and_fix(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_out, injected, code, words = CASES[name]
    out = make_out(tmp_path)
    (tmp_path / "in.jsonl").write_text('{"prompt": "a cat"}\n')
    if injected is not None:
        monkeypatch.setattr(os, "mkdir", failing_mkdir(injected, out))
    monkeypatch.setattr("interleave_thinker.runtime.pipeline.Pipeline.from_config", lambda *a, **k: 1 / 0)
    exit_code, err = batch(monkeypatch, capsys, tmp_path, out)
    assert (exit_code, err.count("error:")) == (code, 1), err
    assert str(out if name != "ENOTDIR" else tmp_path / "file") in err
    assert all(word in err for word in words), err
    assert "ZeroDivisionError" not in err  # found before any model was loaded


def test_train_sft_with_a_file_as_output_dir_exits_2_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("")
    config = tmp_path / "sft.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'taken'}\nmodel: {{name_or_path: tiny:critic}}\ndata: {{train: [d.json]}}\n"
    )
    monkeypatch.setattr("interleave_thinker.train.sft.trainer.run_sft", lambda *a, **k: 1 / 0)
    exit_code, err = cli(monkeypatch, capsys, "train", "sft", "--config", str(config))
    assert (
        exit_code == 2 and f"output_dir {tmp_path / 'taken'}: a file exists where a folder is needed" in err
    )


def test_an_unreadable_batch_json_names_itself_and_offers_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "batch.json").write_text('{"input": "in.jsonl", "ids": ["a", "b')  # a crash mid-write
    (tmp_path / "in.jsonl").write_text('{"prompt": "a cat"}\n')
    exit_code, err = batch(monkeypatch, capsys, tmp_path, out)
    assert exit_code == 2, err
    assert (
        f"{out / 'batch.json'} cannot be read" in err
        and "--fresh" in err
        and "JSONDecodeError" not in err.split(";")[1]
    )


def test_a_journal_that_is_not_a_file_names_itself_and_offers_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "journal.jsonl").mkdir(parents=True)  # every finished request's line would be lost
    (tmp_path / "in.jsonl").write_text('{"prompt": "a cat"}\n')
    exit_code, err = batch(monkeypatch, capsys, tmp_path, out)
    assert exit_code == 2, err
    assert f"{out / 'journal.jsonl'} is not a file" in err and "--fresh" in err


WRITERS: dict[str, Callable[[Path], list[str]]] = {
    "data build": lambda out: ["data", "build", "--input", str(out.parent), "--out", str(out)],
    "data synth": lambda out: ["data", "synth", "--role", "planner", "--out", str(out), "--preset", "tiny"],
    "reward": lambda out: ["reward", "--input", str(out.parent / "r.jsonl"), "--generator", "tiny:",
                           "--judge", "tiny:judge", "--out", str(out / "scored.jsonl")],
    "eval report": lambda out: ["eval", "report", str(out.parent), "--out", str(out / "report.html")],
}  # fmt: skip
"""The other commands that write: a folder named by --out (or holding the --out file) that is a file."""


@pytest.mark.parametrize("command", list(WRITERS))
def test_every_writing_command_refuses_a_file_in_place_of_its_folder_first(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = file(tmp_path / "taken")
    exit_code, err = cli(monkeypatch, capsys, *WRITERS[command](out))
    assert (exit_code, err.count("error:")) == (2, 1), err
    assert str(out) in err and (
        "a file exists where a folder is needed" in err or "a file stands where" in err
    )
