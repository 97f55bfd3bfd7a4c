"""The judge prompts are obtained at run time: folder, cache, or a download at the pinned commit read with
``ast`` and checked by SHA-256; and none of their text is in the repository."""

from __future__ import annotations

import ast
import functools
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from interleave_thinker.core.errors import TemplateError
from interleave_thinker.eval.benchmarks.rise.prompts import PROMPTS as RISE_PROMPTS
from interleave_thinker.eval.benchmarks.ueval.prompts import PROMPTS as UEVAL_PROMPTS
from interleave_thinker.eval.benchmarks.wise.prompts import EXPLANATION_FIELD as WISE_EXPLANATION_FIELD
from interleave_thinker.eval.benchmarks.wise.prompts import LEGACY_PROMPTS as WISE_LEGACY_PROMPTS
from interleave_thinker.eval.benchmarks.wise.prompts import PROMPT_FIELD as WISE_PROMPT_FIELD
from interleave_thinker.eval.benchmarks.wise.prompts import VERIFIED_PROMPTS as WISE_VERIFIED_PROMPTS
from interleave_thinker.eval.benchmarks.wise.prompts import fill as fill_wise
from interleave_thinker.eval.prompts import EvalPromptStore
from tests.conftest import REPO, shared_path

PROTOCOL_PROMPTS = {
    "wise": WISE_VERIFIED_PROMPTS,
    "wise-legacy": WISE_LEGACY_PROMPTS,
    "rise": RISE_PROMPTS,
    "ueval": UEVAL_PROMPTS,
}
PROMPTS = {**WISE_VERIFIED_PROMPTS, **WISE_LEGACY_PROMPTS, **RISE_PROMPTS, **UEVAL_PROMPTS}
"""Every official judge prompt, by name."""


def _shared(name: str) -> str:
    return shared_path("reference", "eval", f"{name}.txt").read_bytes().decode("utf-8")


def _fstring(template: str) -> ast.JoinedStr:
    values: list[ast.expr] = []
    rest = template
    for field_text, key in ((WISE_PROMPT_FIELD, "Prompt"), (WISE_EXPLANATION_FIELD, "Explanation")):
        head, rest = rest.split(field_text, 1)
        expr = ast.Subscript(ast.Name("prompt_data", ast.Load()), ast.Constant(key), ast.Load())
        values += [ast.Constant(head), ast.FormattedValue(expr, -1, None)]
    return ast.JoinedStr([*values, ast.Constant(rest)])


def _wise_source(system: str, user: str) -> str:
    """A scorer file shaped like WISE's: the texts inside build_evaluation_messages(), the user one an f-string."""
    text = lambda node: ast.Dict([ast.Constant("type"), ast.Constant("text")], [ast.Constant("text"), node])  # noqa: E731
    message = lambda role, node: ast.Dict(  # noqa: E731
        [ast.Constant("role"), ast.Constant("content")],
        [ast.Constant(role), ast.List([text(node)], ast.Load())],
    )
    body = ast.Return(
        ast.List([message("system", ast.Constant(system)), message("user", _fstring(user))], ast.Load())
    )
    args = ast.arguments([], [ast.arg("prompt_data"), ast.arg("image_base64")], None, [], [], None, [])
    func = ast.FunctionDef("build_evaluation_messages", args, [body], [], None)
    return ast.unparse(ast.fix_missing_locations(ast.Module([func], [])))


def _sources(tmp_path: Path) -> Path:
    """The four scorer files, laid out as raw.githubusercontent.com serves them, built from the shared texts."""
    root = tmp_path / "raw"
    files: dict[tuple[str, str], str] = {}
    for name, prompt in PROMPTS.items():
        key = (f"{prompt.repo.name}/{prompt.repo.commit}", prompt.source)
        files.setdefault(key, "import os\n")
        value = _shared(name)
        if prompt.kind == "literal":
            files[key] += f"{prompt.locator} = {value!r}\n"
        elif prompt.kind == "strip":  # triple-quoted with real newlines, and CRLF line endings below
            files[key] += f'{prompt.locator} = """\n{value}\n""".strip()\n'
    for repo_path, source in [
        ("PKU-YuanGroup/WISE", "vllm_eval.py"),
        ("PKU-YuanGroup/WISE", "WISE_legacy/gpt_eval.py"),
    ]:
        kind = "verified" if source == "vllm_eval.py" else "legacy"
        commit = PROMPTS["wise_verified_user"].repo.commit
        files[(f"{repo_path}/{commit}", source)] = _wise_source(
            _shared(f"wise_{kind}_system"), _shared(f"wise_{kind}_user")
        )
    for (base, source), text in files.items():
        path = root / base / source
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.replace("\n", "\r\n") if source.startswith(("ueval", "WISE_legacy")) else text
        path.write_bytes(data.encode("utf-8"))
    return root


@pytest.fixture
def raw_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    root = _sources(tmp_path)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_download_extracts_verifies_and_caches(raw_server: tuple[str, Path], tmp_path: Path) -> None:
    url, root = raw_server
    store = EvalPromptStore(base_url=url, cache_dir=tmp_path / "cache")
    for protocol, names in PROTOCOL_PROMPTS.items():
        loaded = store.load(names, protocol)
        assert loaded.origin.startswith("download")
        assert loaded.texts == {n: _shared(n) for n in names}, protocol  # CRLF sources give LF texts
    shutil.rmtree(root)  # the server has nothing now: everything comes from the cache
    again = EvalPromptStore(base_url=url, cache_dir=tmp_path / "cache").load(PROTOCOL_PROMPTS["rise"], "rise")
    assert again.origin.startswith("cache") and again.digests() == {n: PROMPTS[n].sha256 for n in again.texts}


def test_eval_prompts_download_fills_the_cache_for_offline_scoring(
    raw_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app

    url, _ = raw_server
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS_URL", url)
    first = CliRunner().invoke(app, ["eval", "prompts", "download", "rise", "wise"])
    assert first.exit_code == 0, first.output
    assert f"rise: {len(RISE_PROMPTS)} prompts, download {url}" in first.output
    assert f"wise: {len(WISE_VERIFIED_PROMPTS)} prompts, download {url}" in first.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline now: the cache alone serves a scoring run
    cached = EvalPromptStore().load(RISE_PROMPTS, "rise")
    assert cached.origin.startswith("cache") and cached.texts == {n: _shared(n) for n in RISE_PROMPTS}


def test_tampered_download_and_cache_are_refused(raw_server: tuple[str, Path], tmp_path: Path) -> None:
    url, root = raw_server
    commit = PROMPTS["rise_prompt_consist"].repo.commit
    source = root / "PhoenixZ810/RISEBench" / commit / "utils.py"
    source.write_bytes(source.read_bytes().replace(b"image evaluator", b"image  evaluator", 1))
    with pytest.raises(TemplateError, match="SHA-256"):
        EvalPromptStore(base_url=url, cache_dir=tmp_path / "c1").load(PROTOCOL_PROMPTS["rise"], "rise")
    store = EvalPromptStore(base_url=url, cache_dir=tmp_path / "c2")
    store.load(PROTOCOL_PROMPTS["ueval"], "ueval")
    cached = tmp_path / "c2" / PROMPTS["ueval_text_template"].repo.commit / "ueval_text_template.txt"
    cached.write_text(cached.read_text() + " ")
    with pytest.raises(TemplateError, match="edited"):
        EvalPromptStore(base_url=url, cache_dir=tmp_path / "c2").load(PROTOCOL_PROMPTS["ueval"], "ueval")


def test_offline_without_cache_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="INTERLEAVE_THINKER_EVAL_PROMPTS"):
        EvalPromptStore(cache_dir=tmp_path / "empty").load(PROTOCOL_PROMPTS["wise"], "wise")


def test_folder_is_checked(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    shutil.copytree(shared_path("reference", "eval"), folder)
    assert EvalPromptStore(folder=folder).load(PROTOCOL_PROMPTS["wise-legacy"], "wise-legacy").texts[
        "wise_legacy_user"
    ] == _shared("wise_legacy_user")
    (folder / "wise_legacy_user.txt").chmod(0o644)
    (folder / "wise_legacy_user.txt").write_bytes(_shared("wise_legacy_user").replace("  \n", "\n").encode())
    with pytest.raises(TemplateError, match="SHA-256"):
        EvalPromptStore(folder=folder).load(PROTOCOL_PROMPTS["wise-legacy"], "wise-legacy")


def test_wise_fill_is_the_fstring_value() -> None:
    template = _shared("wise_verified_user")
    prompt, explanation = "a {x} and " + WISE_EXPLANATION_FIELD, "b " + WISE_PROMPT_FIELD
    filled = fill_wise(template, prompt, explanation)
    prompt_data = {"Prompt": prompt, "Explanation": explanation}
    node = ast.Expression(_fstring(template))
    assert filled == eval(
        compile(ast.fix_missing_locations(node), "<f>", "eval"), {"prompt_data": prompt_data}
    )


def test_no_judge_prompt_text_is_in_the_repository() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    for name in PROMPTS:
        line = max(_shared(name).splitlines(), key=len).strip()
        if len(line) < 25:  # the two-line rubric templates: too generic to be a phrase of theirs
            continue
        found = subprocess.run(
            ["git", "grep", "--untracked", "-F", "-q", "-e", line[:80]],
            cwd=REPO,
            capture_output=True,
            check=False,
        )
        assert found.returncode == 1, f"text of {name} found in the repository"


@pytest.mark.parametrize("why", ["offline", "unreachable"])
def test_eval_prompts_download_that_cannot_fetch_does_not_advise_running_itself(
    why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, or with the source unreachable, the download command says what to do instead (copy the cache
    from a machine that can fetch, or name a folder), where scoring says "run the download command"."""
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app

    monkeypatch.setenv("INTERLEAVE_THINKER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("INTERLEAVE_THINKER_EVAL_PROMPTS", raising=False)
    if why == "offline":
        monkeypatch.setenv("INTERLEAVE_THINKER_OFFLINE", "1")
    else:
        monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS_URL", "http://127.0.0.1:9")  # the discard port
    result = CliRunner().invoke(app, ["eval", "prompts", "download", "wise"])
    assert isinstance(result.exception, TemplateError)
    message = str(result.exception)
    assert "eval prompts download" not in message and "cannot fetch" in message
    assert str(tmp_path / "home" / "eval-prompts") in message and "INTERLEAVE_THINKER_EVAL_PROMPTS" in message
    with pytest.raises(TemplateError, match="eval prompts download wise"):  # scoring still points at it
        EvalPromptStore().load(PROTOCOL_PROMPTS["wise"], "wise")


def test_the_pins_are_package_data_read_as_they_were_written() -> None:
    """Each benchmark's `prompts.json` travels in the wheel (a package-data pattern) and names every
    prompt with its source, shape, locator and SHA-256 (RISEBench's and UEval's, as pinned before)."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["interleave_thinker"]
    folder = REPO / "src" / "interleave_thinker"
    pins = sorted(p.relative_to(folder).as_posix() for p in folder.glob("eval/benchmarks/*/prompts.json"))
    assert pins == ["eval/benchmarks/rise/prompts.json", "eval/benchmarks/ueval/prompts.json"]
    packaged = {p.relative_to(folder).as_posix() for pattern in patterns for p in folder.glob(pattern)}
    assert set(pins) <= packaged  # globbed as setuptools does: `*` stops at a `/`
    consist, rubric = RISE_PROMPTS["rise_prompt_consist"], UEVAL_PROMPTS["ueval_image_rubric_template"]
    assert (consist.repo.commit, consist.source, consist.kind, consist.locator) == (
        "5f226519b25c005bb32fb83864bbd1845ab85c23",
        "utils.py",
        "literal",
        "prompt_consist",
    )
    assert consist.sha256 == "84b272d821670cd2466866e27d80bed659dc677964a62a2c1459ad673c4eaf70"
    assert (rubric.repo.name, rubric.kind, rubric.locator) == (
        "zlab-princeton/UEval",
        "strip",
        "IMAGE_RUBRIC_TEMPLATE",
    )
    assert (len(RISE_PROMPTS), len(UEVAL_PROMPTS)) == (14, 6)
