"""Every command that writes an output folder refuses a link planted in it (issue 41, item 3).

An output folder may come from someone else (a resumed run, a shared disk): a symbolic link planted at a
file or folder a command writes must never carry its writes outside. One case per writing command, each
run in this process from the command line with backends nobody answers on; each must stop on the link
(one line naming it) before any model is loaded, and leave the file outside as it was. `eval score` has
its own cases (tests/eval/test_eval_hostile.py), with a judge.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from interleave_thinker.cli.main import main
from tests.conftest import shared_path
from tests.helpers.runs import make_run

DEAD_VLM = "openai:http://127.0.0.1:9/v1#x"
SERVED = ["--planner", DEAD_VLM, "--critic", DEAD_VLM, "--generator", "http:http://127.0.0.1:9"]


def requests(tmp_path: Path) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "prompt": "Draw [[a cat]]"}\n', encoding="utf-8")
    return str(path)


def wise(tmp_path: Path) -> str:
    folder = tmp_path / "wise"
    folder.mkdir()
    record = {"prompt_id": 1, "Prompt": "P", "Explanation": "E", "Category": "Cultural knowledge"}
    (folder / "cultural_verified.json").write_text(json.dumps([{**record, "Subcategory": "x"}]))
    return str(folder)


def runs(tmp_path: Path) -> str:
    make_run(tmp_path / "runs", "r1", [[(False, 3.0), (True, 8.5)], [(True, 9.0)]])  # images to copy
    return str(tmp_path / "runs")


# command -> (its arguments for tmp_path and --out, the name planted in --out, a folder or a file)
WRITERS: dict[str, tuple[Callable[[Path, Path], list[str]], str]] = {
    "batch": (lambda t, out: ["batch", "--input", requests(t), "--out", str(out), *SERVED], "journal.jsonl"),
    "data generate": (lambda t, out: ["data", "generate", "--input", requests(t), "--out", str(out), *SERVED,
                                      "--judge", DEAD_VLM], "journal.jsonl"),
    "eval generate": (lambda t, out: ["eval", "generate", "wise", "--data", wise(t), "--out", str(out),
                                      *SERVED], "journal.jsonl"),
    "eval run": (lambda t, out: ["eval", "run", "wise", "--data", wise(t), "--out", str(out), *SERVED,
                                 "--judge", DEAD_VLM], ".lock"),
    "run": (lambda t, out: ["run", "Draw [[a cat]]", "--out", str(out), *SERVED], ".lock"),
    "data prompts": (lambda t, out: ["data", "prompts", "--out", str(out / "prompts.jsonl"), "--llm", DEAD_VLM,
                                     "--work-dir", str(out)], ".lock"),
    "data synth": (lambda t, out: ["data", "synth", "--role", "critic", "--n", "2", "--out", str(out)], "images/"),
    "data build": (lambda t, out: ["data", "build", "--input", runs(t), "--out", str(out), "--no-trl"], "images/"),
    "data export": (lambda t, out: ["data", "export", "--input", runs(t), "--format", "interleaved-easy",
                                    "--out", str(out), "--no-trl"], "images/"),
}  # fmt: skip


LOADER_BINDERS = (
    "interleave_thinker.backends.specs",
    "interleave_thinker.runtime.pipeline",
    "interleave_thinker.datagen.generate",
    "interleave_thinker.eval.base_mode",
    "interleave_thinker.tiny.kind",
)
"""The modules that bind the two loaders by name when imported (``from ... import load_vlm_backend``)."""


def forbid_model_loads(monkeypatch: pytest.MonkeyPatch, no_model: Callable[..., None]) -> None:
    """Replace both loaders wherever they are bound, for this test only. The binders are imported first:
    a module a command imports lazily would otherwise bind the replacement for good, and every later
    test in the worker would see "a model was loaded" (a fresh-clone failure of 15 tests)."""
    for module_name in LOADER_BINDERS:
        importlib.import_module(module_name)
    real = {
        name: getattr(sys.modules[LOADER_BINDERS[0]], name)
        for name in ("load_vlm_backend", "load_image_backend")
    }
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("interleave_thinker")]:
        for name, function in real.items():
            if getattr(module, name, None) is function:
                monkeypatch.setattr(module, name, no_model)


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_link_planted_in_the_output_folder_is_refused_before_anything_loads(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments, planted = WRITERS[command]
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    link = out / planted.rstrip("/")
    link.symlink_to(outside if planted.endswith("/") else victim, target_is_directory=planted.endswith("/"))

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    forbid_model_loads(monkeypatch, no_model)
    if command == "eval run":  # it checks its judge's prompts first
        monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))
    monkeypatch.setattr(sys, "argv", ["interleave-thinker", *arguments(tmp_path, out)])
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as exited:
        main()
    err = " ".join(capsys.readouterr().err.split())

    assert exited.value.code not in (0, None), err
    assert str(link) in err and ("symbolic link" in err or "outside the output folder" in err), err
    assert "a model was loaded" not in err and err.count("error:") == 1, err
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert victim.read_text() == "precious\n" and link.is_symlink()
