"""A hub model that is neither cached nor reachable fails in seconds with one line; online, the download's
size is said before it starts.

The commands run as a user runs them (the installed console command, the default ``official`` preset,
an empty Hugging Face cache), against a hub name under the reserved ``.invalid`` domain and a port on
127.0.0.1 that accepts connections and never answers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from interleave_thinker.backends import hub
from interleave_thinker.core.errors import InputError, ModelNotFoundError
from tests.conftest import shared_path

CLI = str(Path(sys.executable).with_name("interleave-thinker"))
PLANNER = "InterleaveThinker/InterleaveThinker-Planner-8B"
BOUND_S = 60.0
"""Catches a hang only (a busy machine takes seconds to import): the promise itself, a bounded wait, is
the product's hub timeout, which the one line names ('no answer within N s')."""


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that completes the TCP handshake (the kernel's backlog) and never sends a byte."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def _online_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "INTERLEAVE_THINKER_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), HOME=str(tmp_path / "home"))
    return env


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "a", "prompt": "How to draw a cat?"}) + "\n")
    wise = shared_path("benchmarks", "wise")
    return {
        "run": ["run", "How to draw a cat?", "--out", str(tmp_path / "run")],
        "batch": ["batch", "--input", str(requests), "--out", str(tmp_path / "batch")],
        "eval generate": ["eval", "generate", "wise", "--data", str(wise), "--out", str(tmp_path / "ev")],
        "demo": ["demo", "--port", "1"],  # never reached: the check comes first
    }


def _assert_one_line(name: str, code: int, stderr: str, elapsed: float, cause: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, f"{name}: exit {code}\n{stderr}"
    assert elapsed < BOUND_S, f"{name}: {elapsed:.1f} s"
    assert len(lines) == 1, f"{name}: {lines}"
    line = lines[0]
    assert line.startswith("error: Model " + PLANNER), line
    assert cause in line and "--preset tiny" in line and "HF_HUB_OFFLINE" in line, line


def test_every_command_fails_in_seconds_when_the_hub_never_answers(tmp_path: Path, silent_port: int) -> None:
    env = _online_env(tmp_path, f"http://127.0.0.1:{silent_port}")
    started = time.monotonic()
    # All at once: each command waits out the hub's timeout, and the waits need not follow one another.
    procs = {
        name: subprocess.Popen(
            [CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, args in _commands(tmp_path).items()
    }
    try:
        for name, proc in procs.items():
            _, stderr = proc.communicate(timeout=120)
            _assert_one_line(name, proc.returncode, stderr, time.monotonic() - started, "no answer within")
    finally:
        for proc in procs.values():
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    ("endpoint", "offline", "cause"),
    [("http://hub.invalid", False, "cannot be reached"), ("http://hub.invalid", True, "HF_HUB_OFFLINE")],
)
def test_run_fails_at_once_on_an_unknown_hub_name_or_offline(
    tmp_path: Path, endpoint: str, offline: bool, cause: str
) -> None:
    env = _online_env(tmp_path, endpoint)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    started = time.monotonic()
    proc = subprocess.run(
        [CLI, *_commands(tmp_path)["run"]], env=env, capture_output=True, text=True, timeout=120
    )
    _assert_one_line("run", proc.returncode, proc.stderr, time.monotonic() - started, cause)


class _Hub(BaseHTTPRequestHandler):
    """The hub's routes as ``huggingface_hub`` reads them: ``/api/models/ORG/NAME`` with ``blobs=true``
    lists files and sizes, ``.../revision/REV`` names the commit, ``/ORG/NAME/resolve/COMMIT/FILE``
    serves a file (HEAD: its commit, etag and size headers) from ``files``."""

    repos: ClassVar[dict[str, dict[str, object]]] = {}
    files: ClassVar[dict[str, dict[str, bytes]]] = {}
    asked: ClassVar[list[str]] = []
    COMMIT: ClassVar[str] = "0123456789abcdef0123456789abcdef01234567"
    hostile: ClassVar[dict[str, str]] = {}
    cdn_auth: ClassVar[list[str | None]] = []
    """Values a hostile hub sends instead of the true ones: ``sha``, ``etag``, ``commit`` (a file's header)."""

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        path, _, query = self.path.partition("?")
        self.asked.append(f"{self.command} {self.path}")
        if path.startswith("/cdn/"):  # where the hub redirects large files: bytes only
            repo, _, name = path.removeprefix("/cdn/").partition("/resolve/")
            self.cdn_auth.append(self.headers.get("authorization"))
            data = self.files.get(repo, {}).get(name.partition("/")[2])
            self._send(200, data or b"", {"etag": '"cdn-etag"'}, head=head)
            return
        if "/resolve/" in path and self.hostile.get("redirect"):
            headers = {"x-repo-commit": self.COMMIT, "x-linked-etag": '"' + "b" * 64 + '"'}
            self._send(302, b"", {**headers, "location": "/cdn" + path}, head=head)
            return
        if "/resolve/" in path:
            repo, _, rest = path.lstrip("/").partition("/resolve/")
            data = self.files.get(repo, {}).get(rest.partition("/")[2])
            headers = {
                "x-repo-commit": self.hostile.get("commit", self.COMMIT),
                "etag": self.hostile.get("etag", f'"{hash(data)}"'),
            }
            headers = headers if data is not None else {}
            self._send(200 if data is not None else 404, data or b"", headers, head=head)
            return
        if "/tree/" in path:
            repo = path.removeprefix("/api/models/").partition("/tree/")[0]
            listed = self.repos.get(repo, {}).get("siblings") or []
            tree = [
                {"type": "file", "path": e["rfilename"], "size": e["size"], "oid": str(hash(e["rfilename"]))}
                for e in listed  # type: ignore[attr-defined]
            ]
            self._send(200, json.dumps(tree).encode(), {"content-type": "application/json"}, head=head)
            return
        repo, _, revision = path.removeprefix("/api/models/").partition("/revision/")
        info = self.repos.get(repo)
        ok = info is not None and ("blobs=true" in query or bool(revision))
        sha = self.hostile.get("sha", self.COMMIT)
        reply = {**info, "sha": sha} if ok and info is not None else {"error": "Repository not found"}
        self._send(
            200 if ok else 404, json.dumps(reply).encode(), {"content-type": "application/json"}, head=head
        )

    def _send(self, status: int, body: bytes, headers: dict[str, str], *, head: bool) -> None:
        self.send_response(status)
        for name, value in {**headers, "content-length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[type[_Hub]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hub.repos, _Hub.files, _Hub.asked, _Hub.hostile, _Hub.cdn_auth = {}, {}, [], {}, []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    from huggingface_hub import constants  # it read HF_HUB_OFFLINE when first imported, by whichever test

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_cache_root", lambda: tmp_path / "hf" / "hub")
    monkeypatch.setattr(hub, "_endpoint", lambda: f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setattr(hub, "_checked", set())
    yield _Hub
    server.shutdown()
    server.server_close()


def test_a_download_is_announced_with_its_size_once(
    fake_hub: type[_Hub], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from interleave_thinker.backends import hub_download

    fetched: list[tuple[str, tuple[str, ...], int]] = []
    monkeypatch.setattr(
        hub_download, "fetch", lambda repo, skipped, size, **_: fetched.append((repo, skipped, size))
    )
    fake_hub.repos["org/model"] = {
        "id": "org/model",
        "gated": False,
        "siblings": [
            {"rfilename": "config.json", "size": 2_000},
            {"rfilename": "model-00001-of-00002.safetensors", "size": 4_000_000_000},
            {"rfilename": "model-00002-of-00002.safetensors", "size": 1_500_000_000},
            {"rfilename": "pytorch_model.bin", "size": 9_000_000_000},  # skipped: safetensors are there
        ],
    }
    hub.ensure_available("org/model")
    hub.ensure_available("org/model")
    err = capsys.readouterr().err
    assert err.count("downloading org/model") == 1
    assert "5.5 GB" in err
    assert len(fake_hub.asked) == 1
    assert fetched == [("org/model", hub.skipped_patterns(fake_hub.repos["org/model"]), 5_500_002_000)]
    assert "*.bin" in fetched[0][1]


def test_a_download_is_fetched_under_one_bar_without_the_fallback_weights(
    fake_hub: type[_Hub], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The announced files land in the cache before the loader asks (so the loader draws no bars of its
    own), the skipped fallback weights are never requested, and stderr has one bar: the model's."""
    files = {"config.json": b"{}", "model.safetensors": b"w" * 300_000, "sub/tokenizer.json": b"[1]"}
    fake_hub.files["org/small"] = {**files, "pytorch_model.bin": b"b" * 1_000}
    fake_hub.repos["org/small"] = {
        "id": "org/small",
        "gated": False,
        "siblings": [
            {"rfilename": name, "size": len(data)} for name, data in fake_hub.files["org/small"].items()
        ],
    }
    hub.ensure_available("org/small")
    snapshot = tmp_path / "hf" / "hub" / "models--org--small" / "snapshots" / _Hub.COMMIT
    assert {
        p.relative_to(snapshot).as_posix(): p.read_bytes() for p in snapshot.rglob("*") if p.is_file()
    } == files
    assert not any("pytorch_model.bin" in line for line in fake_hub.asked)
    err = capfd.readouterr().err
    labels = {
        line.split(":")[0].strip()
        for line in err.replace("\r", "\n").splitlines()
        if "%" in line or "B/s" in line
    }
    assert labels == {"downloading org/small"}, err
    assert "Fetching" not in err and "Downloading bytes" not in err
    assert "downloading org/small from" in err and ": 300 KB (first use only" in err


def test_a_download_that_stops_names_the_model_and_the_way_on(fake_hub: type[_Hub]) -> None:
    fake_hub.repos["org/broken"] = {
        "id": "org/broken",
        "gated": False,
        "siblings": [{"rfilename": "a.json", "size": 2}],
    }
    with pytest.raises(
        ModelNotFoundError, match=r"Downloading org/broken stopped \(.*\)\. Run the command again"
    ):
        hub.ensure_available("org/broken")


def test_a_missing_or_gated_model_is_one_line_naming_the_way_out(fake_hub: type[_Hub]) -> None:
    with pytest.raises(ModelNotFoundError, match=r"org/absent does not exist on the Hugging Face hub"):
        hub.ensure_available("org/absent")
    fake_hub.repos["org/gated"] = {"id": "org/gated", "gated": "manual", "siblings": []}
    with pytest.raises(ModelNotFoundError, match=r"org/gated needs a Hugging Face token.*HF_TOKEN"):
        hub.ensure_available("org/gated")


def test_a_cached_model_asks_nothing(fake_hub: type[_Hub], tmp_path: Path) -> None:
    snapshot = tmp_path / "hf" / "hub" / "models--org--cached" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    hub.ensure_available("org/cached")
    assert fake_hub.asked == []


def test_credentials_in_the_endpoint_stay_out_of_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.setattr(hub, "_endpoint", lambda: "http://user:s3cret@hub.invalid")
    with pytest.raises(ModelNotFoundError) as caught:
        hub.ensure_available("org/model")
    assert "s3cret" not in str(caught.value) and "http://hub.invalid" in str(caught.value)


def test_our_offline_switch_keeps_dataset_loads_off_the_network(
    fake_hub: type[_Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``datasets`` and the hub read HF_HUB_OFFLINE when imported: a process that set a switch later (or
    only ours) still reads hub datasets from the cache alone, for `batch` and `eval` inputs alike."""
    import datasets.config
    from huggingface_hub import constants

    from interleave_thinker.eval.benchmarks.ueval.data import load as load_ueval
    from interleave_thinker.runtime.batch_inputs import read_batch_input

    for module, endpoint_name in ((constants, "ENDPOINT"), (datasets.config, "HF_ENDPOINT")):
        monkeypatch.setattr(module, endpoint_name, hub._endpoint())
        monkeypatch.setattr(module, "HF_HUB_OFFLINE", False)  # imported before any switch was set
    monkeypatch.setenv("INTERLEAVE_THINKER_OFFLINE", "1")
    with pytest.raises(InputError, match="Offline, a dataset must already be in the Hugging Face cache"):
        read_batch_input("hf:org/not-cached:test")
    with pytest.raises(InputError, match="Offline, a dataset must already be in the Hugging Face cache"):
        load_ueval("hf:org/not-cached:test")
    assert fake_hub.asked == []
    assert (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE) == (False, False)  # put back after


@pytest.mark.parametrize(
    ("hostile", "name", "announced", "refusal"),
    [
        ({"sha": "../../../../escaped"}, "config.json", None, "commit"),
        ({"sha": "0123456789abcdef0123456789abcdef01234567/../../../escaped"}, "config.json", None, "commit"),
        ({}, "../../../../../escaped.json", None, "leaves the snapshot"),
        ({}, "/tmp/escaped.json", None, "leaves the snapshot"),
        ({}, "sub/./../../../../../escaped.json", None, "leaves the snapshot"),
        ({"etag": '"../../../../escaped"'}, "config.json", None, "ETag"),
        ({"etag": '"/tmp/escaped"'}, "config.json", None, "ETag"),
        ({"commit": "../../../escaped"}, "config.json", None, "from the commit"),
        ({}, "config.json", 29, "more than the 29 bytes"),
    ],
)
def test_a_hostile_hub_writes_nothing_outside_the_cache_nor_past_the_announced_size(
    fake_hub: type[_Hub],
    tmp_path: Path,
    hostile: dict[str, str],
    name: str,
    announced: int | None,
    refusal: str,
) -> None:
    """Issue 41, item 2: a crafted commit, file name or ETag is refused before anything is written, and a
    file longer than announced is cut at the announced size and not kept (no blob, no temporary file)."""
    data = b"x" * 1_000_000 if announced else b"{}"
    fake_hub.hostile = hostile
    fake_hub.files["org/evil"] = {name.lstrip("/"): data, name: data}
    fake_hub.repos["org/evil"] = {
        "id": "org/evil",
        "gated": False,
        "siblings": [{"rfilename": name, "size": announced or len(data)}],
    }
    with pytest.raises(ModelNotFoundError, match=f"Downloading org/evil stopped .*{refusal}"):
        hub.ensure_available("org/evil")
    escaped = [p for p in tmp_path.parent.rglob("escaped*")] + list(Path("/tmp").glob("escaped*"))
    assert escaped == []
    cache = tmp_path / "hf" / "hub"
    stored = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    assert stored == []  # nothing kept: neither the file nor a temporary part of it


def test_a_redirected_file_is_named_by_the_hub_and_fetched_without_the_token(
    fake_hub: type[_Hub], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's own answer names the blob (``X-Linked-Etag``); the bytes come from where it redirects,
    and the user's token is not sent there."""
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    fake_hub.hostile = {"redirect": "1"}
    fake_hub.files["org/lfs"] = {"model.safetensors": b"w" * 5_000}
    fake_hub.repos["org/lfs"] = {
        "id": "org/lfs",
        "gated": False,
        "siblings": [{"rfilename": "model.safetensors", "size": 5_000}],
    }
    hub.ensure_available("org/lfs")
    repo = tmp_path / "hf" / "hub" / "models--org--lfs"
    assert (repo / "snapshots" / _Hub.COMMIT / "model.safetensors").read_bytes() == b"w" * 5_000
    assert [p.name for p in (repo / "blobs").iterdir()] == ["b" * 64]
    assert fake_hub.cdn_auth == [None]
