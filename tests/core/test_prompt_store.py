from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import threading
import tomllib
from collections.abc import Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from interleave_thinker.core.errors import TemplateError
from interleave_thinker.core.prompt_store import (
    BUILTIN_PACKAGE,
    PINNED_COMMIT,
    RELEASED,
    TemplateStore,
    builtin_templates,
)
from tests.conftest import REPO


def repository_tree(prompts_dir: Path, root: Path, *, tamper: str | None = None) -> Path:
    """Lay out the authors' two source files at the pinned commit, built from the shared templates."""
    by_source: dict[str, list[str]] = {}
    for name, ref in RELEASED.items():
        text = (prompts_dir / f"{name}.txt").read_text(encoding="utf-8")
        if name == tamper:
            text = text.replace("the", "teh", 1)
        by_source.setdefault(ref.source, []).append(f"{ref.literal} = {text!r}\n\nUNRELATED = {{'a': 1}}\n")
    for source, chunks in by_source.items():
        path = root / PINNED_COMMIT / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import os\n\n" + "\n".join(chunks), encoding="utf-8")
    return root


Serve = Callable[[Path], tuple[str, list[str]]]
"""Start a static server over a folder: (its URL, the paths requested so far)."""


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[ThreadingHTTPServer] = []

    def start(root: Path) -> tuple[str, list[str]]:
        requested: list[str] = []

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                requested.append(self.path)

        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", requested

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_shared_files_match_pinned_digests(prompts_dir: Path) -> None:
    for name, ref in RELEASED.items():
        assert hashlib.sha256((prompts_dir / f"{name}.txt").read_bytes()).hexdigest() == ref.sha256


def test_folder_is_used_and_verified(prompts_dir: Path, tmp_path: Path) -> None:
    templates = TemplateStore(folder=prompts_dir, cache_dir=tmp_path / "cache", download=False).load()
    assert templates.kind == "released"
    assert templates.get("critic") == (prompts_dir / "critic.txt").read_text(encoding="utf-8")
    assert templates.info().digests["planner_narrative"] == RELEASED["planner_narrative"].sha256


def test_tampered_folder_file_is_rejected(prompts_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    shutil.copytree(prompts_dir, folder)
    (folder / "critic.txt").write_text((prompts_dir / "critic.txt").read_text() + " ", encoding="utf-8")
    with pytest.raises(TemplateError, match=r"critic\.txt.*SHA-256"):
        TemplateStore(folder=folder, download=False).load()
    edited = TemplateStore(folder=folder, download=False, verify=False).load()
    assert edited.kind == "custom"


def test_download_from_local_server_then_offline_cache(
    prompts_dir: Path, tmp_path: Path, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    url, requested = serve(repository_tree(prompts_dir, tmp_path / "repo"))
    cache = tmp_path / "cache"
    templates = TemplateStore(cache_dir=cache, base_url=url).load()
    assert templates.kind == "released" and templates.origin.startswith("download")
    assert sorted(requested) == sorted(
        {f"/{PINNED_COMMIT}/UEval/system.py", f"/{PINNED_COMMIT}/train/EasyR1/viescore/vie_prompts.py"}
    )
    for name in RELEASED:
        assert (cache / PINNED_COMMIT / f"{name}.txt").read_bytes() == (
            prompts_dir / f"{name}.txt"
        ).read_bytes()
    # Offline now, with the server gone: the cache alone serves them.
    monkeypatch.setenv("INTERLEAVE_THINKER_OFFLINE", "1")
    again = TemplateStore(cache_dir=cache, base_url="http://127.0.0.1:9").load()
    assert again.kind == "released" and again.origin.startswith("cache")
    assert again.texts == templates.texts


def test_tampered_download_is_rejected(
    prompts_dir: Path, tmp_path: Path, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    url, _ = serve(repository_tree(prompts_dir, tmp_path / "repo", tamper="judge_pq"))
    store = TemplateStore(cache_dir=tmp_path / "cache", base_url=url, builtin_fallback=False)
    with pytest.raises(TemplateError, match=r"judge_pq.*_prompts_0shot_rule_PQ_ours.*SHA-256"):
        store.download()
    assert not (tmp_path / "cache" / PINNED_COMMIT).exists()


def test_tampered_cache_is_rejected(prompts_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache" / PINNED_COMMIT
    shutil.copytree(prompts_dir, cache)
    (cache / "planner_guidance.txt").write_text("changed {text_input}", encoding="utf-8")
    with pytest.raises(TemplateError, match=r"planner_guidance.txt fails its SHA-256"):
        TemplateStore(cache_dir=tmp_path / "cache", download=False).load()


def test_builtin_fallback_when_nothing_is_available(tmp_path: Path) -> None:
    templates = TemplateStore(cache_dir=tmp_path / "empty", download=True).load()  # offline by fixture
    assert templates.kind == "builtin"
    assert "{text_input}" in templates.get("planner_narrative")
    assert "{original_instruction}" in templates.get("critic") and "{rewritten_prompt}" in templates.get(
        "critic"
    )
    with pytest.raises(TemplateError, match="offline"):
        TemplateStore(cache_dir=tmp_path / "empty", builtin_fallback=False).load()


def test_builtin_templates_are_our_own_words(prompts_dir: Path) -> None:
    ours = builtin_templates().texts
    for name, text in ours.items():
        released = (prompts_dir / f"{name}.txt").read_text(encoding="utf-8")
        released_lines = {line.strip() for line in released.splitlines() if len(line.strip()) > 40}
        assert not released_lines & {line.strip() for line in text.splitlines()}, name


def test_env_folder_is_honoured(prompts_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLEAVE_THINKER_PROMPTS", str(prompts_dir))
    assert TemplateStore(download=False).load().origin == str(prompts_dir)


def test_check_reports_status(prompts_dir: Path, tmp_path: Path) -> None:
    rows = TemplateStore(folder=prompts_dir, cache_dir=tmp_path).check()
    assert {status for _, _, status in rows} == {"ok"}
    rows = TemplateStore(cache_dir=tmp_path).check()
    assert {status for _, _, status in rows} == {"missing"}


def _placeholders(text: str) -> set[str]:
    return set(re.findall(r"\{[a-z_]+\}|<instruction>|<image>", text))


def test_builtin_templates_are_the_released_set_with_its_placeholders(prompts_dir: Path) -> None:
    ours = builtin_templates()
    assert sorted(ours.texts) == sorted(RELEASED)
    for name, text in ours.texts.items():
        released = (prompts_dir / f"{name}.txt").read_text(encoding="utf-8")
        assert _placeholders(text) == _placeholders(released), name


def test_the_prompts_package_ships_every_template() -> None:
    """The wheel carries ``prompts/*.txt``: every built-in template matches a package-data pattern."""
    package_dir = REPO / "src" / Path(*BUILTIN_PACKAGE.split("."))
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["interleave_thinker"]
    files = sorted(path.relative_to(package_dir.parent).as_posix() for path in package_dir.glob("*.txt"))
    assert [f"{name}.txt" for name in sorted(RELEASED)] == [f.split("/")[-1] for f in files]
    for file in files:
        assert any(fnmatch.fnmatch(file, pattern) for pattern in patterns), file
