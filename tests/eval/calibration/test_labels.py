"""`eval calibrate download`: a label set fetched at its pinned commit (served on 127.0.0.1 from the
../shared copy), every file checked by SHA-256; a changed file is refused and nothing is written for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import TemplateError
from interleave_thinker.eval.calibration import labels
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.conftest import shared_path


def _serving(folder: Path, label_set: labels.LabelSet, tamper: str | None = None) -> LocalServer:
    prefix = f"/{label_set.repo}/{label_set.commit}/{label_set.folder}/"
    seen: list[str] = []

    def handle(request: Request) -> Reply:
        rel = request.path.removeprefix(prefix)
        path = folder / rel
        if not request.path.startswith(prefix) or rel not in label_set.files or not path.is_file():
            return Reply(404, {"error": "not found"})
        seen.append(rel)
        data = path.read_bytes()
        return Reply(200, data + b" " if rel == tamper else data, content_type="application/octet-stream")

    return LocalServer(handle)


def test_download_writes_the_verified_set_and_calibrate_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opening = labels.find("opening")
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with _serving(shared_path("reference", "calibration", "opening"), opening) as server:
        monkeypatch.setenv(labels.BASE_URL_ENV, server.url)
        to = tmp_path / "opening"
        first = CliRunner().invoke(app, ["eval", "calibrate", "download", "opening", "--to", str(to)])
        assert first.exit_code == 0, (first.output, first.exception)
        assert "opening: 4 files downloaded and verified, 0 already present" in first.output
        again = CliRunner().invoke(app, ["eval", "calibrate", "download", "opening", "--to", str(to)])
        assert "opening: 0 files downloaded and verified, 4 already present" in again.output
    assert labels.check_folder(opening, to)["pinned"] is True
    out = CliRunner().invoke(
        app, ["eval", "calibrate", "opening", "--data", str(to), "--out", str(tmp_path / "o")]
    )
    assert "71.08%  3058/4302 pairs" in out.output


def test_a_changed_file_is_refused_and_offline_downloads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opening = labels.find("opening")
    with pytest.raises(TemplateError, match="offline mode is on"):
        labels.download(opening, tmp_path / "x", base_url="http://127.0.0.1:9")
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    tampered = "gpt-judge_modelAB_results.json"
    served = _serving(shared_path("reference", "calibration", "opening"), opening, tamper=tampered)
    with served as server, pytest.raises(TemplateError, match=f"{tampered} fails its SHA-256 check"):
        labels.download(opening, tmp_path / "x", base_url=server.url)
    assert not (tmp_path / "x" / tampered).exists()
    record = labels.check_folder(opening, tmp_path / "x")
    assert (record["pinned"], record["present"]) == (False, 1)
