"""Checkpoints a full disk cut short (issue 48, item 3): ``--resume`` takes the newest complete one and
names the skipped ones; a save that fails leaves no complete-looking folder and says so in one line."""

from __future__ import annotations

import errno
import json
import logging
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.core.errors import ConfigError, StorageError
from interleave_thinker.train.common import finished_at, resume_checkpoint
from tests.helpers.common import grpo_config


def checkpoint(out: Path, step: int) -> Path:
    """A complete checkpoint laid out as the Trainer writes one (weights, optimizer and RNG state, the
    trainer state last), in the files' own formats, written without torch to stay fast: safetensors is an
    8-byte header length, a JSON header and the data; ``torch.save`` writes a zip archive."""
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(256))
    for name in ("optimizer.pt", "rng_state.pth"):
        with zipfile.ZipFile(folder / name, "w") as archive:
            archive.writestr("archive/data.pkl", bytes(512))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 1.0}))
    return folder


def cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


HARMS = {
    "no-trainer-state": lambda f: (f / "trainer_state.json").unlink(),
    "optimizer-cut": lambda f: cut(f / "optimizer.pt"),
    "weights-cut": lambda f: cut(f / "model.safetensors"),
    "state-cut": lambda f: cut(f / "trainer_state.json"),
}


@pytest.mark.parametrize("harm", list(HARMS))
def test_resume_takes_the_newest_complete_checkpoint_and_names_the_skipped(
    tmp_path: Path, harm: str, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint(tmp_path, 20)
    HARMS[harm](checkpoint(tmp_path, 40))
    with caplog.at_level(logging.WARNING, logger="interleave_thinker.train.saves"):
        assert resume_checkpoint(tmp_path, True) == tmp_path / "checkpoint-20"
    [warning] = [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "checkpoint-40") in warning and "resuming from" in warning
    assert finished_at(tmp_path, 40, 1.0) is None  # the partial newest one is not "finished at 40"


def test_only_incomplete_checkpoints_is_an_error_naming_them(tmp_path: Path) -> None:
    (checkpoint(tmp_path, 40) / "trainer_state.json").unlink()
    with pytest.raises(
        ConfigError, match=r"no complete checkpoint in .*checkpoint-40 \(trainer_state.json missing\)"
    ):
        resume_checkpoint(tmp_path, True)


@pytest.mark.slow  # a 2-step SFT run of the tiny critic, then its resume
def test_a_full_disk_at_a_save_says_so_and_resume_continues_from_the_checkpoint_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from interleave_thinker.cli.data import app as data_app
    from interleave_thinker.train.sft.config import SFTRunConfig
    from interleave_thinker.train.sft.trainer import run_sft

    made = CliRunner().invoke(data_app, ["synth", "--role", "critic", "--n", "8", "--out", str(tmp_path)])
    assert made.exit_code == 0, made.output

    def config(out: Path) -> SFTRunConfig:
        return SFTRunConfig.model_validate(
            {
                "role": "critic",
                "output_dir": str(out),
                "model": {"name_or_path": "tiny:critic", "dtype": "float32", "image_max_pixels": None},
                "data": {"train": [str(tmp_path / "critic_sft.json")]},
                "training": {"learning_rate": 1e-2, "max_steps": 2, "save_steps": 1, "per_device_train_batch_size": 2,
                             "max_length": None, "bf16": False, "logging_steps": 1, "report_to": "none",
                             "use_cpu": True},
            }
        )  # fmt: skip

    out = tmp_path / "out"
    save = torch.save

    def full_disk(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if str(f).endswith("checkpoint-2/optimizer.pt"):  # the weights of checkpoint-2 are written by now
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(StorageError) as caught:
        run_sft(config(out))
    assert str(caught.value).startswith(f"no space left while saving checkpoint-2 under {out};")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint-1"]
    monkeypatch.setattr(torch, "save", save)

    (out / "checkpoint-2").mkdir()  # and a partial one from a save that died with the process
    shutil.copy(out / "checkpoint-1" / "model.safetensors", out / "checkpoint-2" / "model.safetensors")
    resumed = run_sft(config(out), resume=True)
    assert resumed.global_step == 2 and resumed.start_step == 1
    assert json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2


@pytest.mark.slow  # a 2-step GRPO run of the random tiny planner, then its resume
def test_grpo_resume_passes_over_a_partial_newest_checkpoint(tmp_path: Path) -> None:
    from interleave_thinker.train.grpo import run_grpo

    steps = {"num_generations": 2, "per_device_train_batch_size": 2, "max_steps": 2, "save_steps": 1}
    training = {**steps, "max_completion_length": 8}
    config = grpo_config(tmp_path / "grpo", "planner", "tiny:planner", {"synthetic": 4}, training=training)
    assert run_grpo(config).global_step == 2
    (tmp_path / "grpo" / "checkpoint-2" / "trainer_state.json").unlink()  # a save a full disk cut short
    resumed = run_grpo(config, resume=True)
    assert (resumed.start_step, resumed.global_step) == (1, 2)
