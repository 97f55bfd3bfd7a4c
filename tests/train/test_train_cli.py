"""`train sft` / `train grpo` as a TRL user expects: `--set` overrides, a progress bar, no warnings caused
by our own arguments, and `--resume` of a finished run that trains nothing."""

from __future__ import annotations

import gc
import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.train.common import finished_at
from interleave_thinker.train.grpo.config import GRPORunConfig
from interleave_thinker.train.overrides import flag_sets, parse_value
from interleave_thinker.train.sft.config import SFTRunConfig
from tests.helpers.common import REPO

OUR_ALIAS = "`gradient_checkpointing"
"""transformers' deprecation of the argument name we used to pass (not TRL's own `is_gradient_checkpointing`)."""


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def sft_yaml(tmp: Path) -> Path:
    return write_yaml(
        tmp / "sft.yaml",
        {
            "output_dir": str(tmp / "out"),
            "model": {"name_or_path": "tiny:critic"},
            "data": {"train": ["data/critic_sft.json"]},
            "training": {"learning_rate": 0.01, "report_to": "none"},
        },
    )


# --- --set ---------------------------------------------------------------------------------------------------


def test_set_values_are_yaml_and_checked_by_the_config_model(tmp_path: Path) -> None:
    sets = [
        "training.learning_rate=1e-5",
        "training.max_steps=7",
        "training.bf16=false",
        "training.report_to=[tensorboard]",
        "model.image_max_pixels=null",
        "data.train=[a.json, b.json]",
        "finetune.lora.r=4",
        "trl.disable_tqdm=true",
    ]
    config = SFTRunConfig.load(sft_yaml(tmp_path), sets=sets)
    assert config.training.learning_rate == 1e-5 and config.training.max_steps == 7
    assert config.training.bf16 is False and config.training.report_to == ["tensorboard"]
    assert config.model.image_max_pixels is None and config.finetune.lora.r == 4
    assert config.data.train == [Path("a.json"), Path("b.json")]
    assert config.trl == {"disable_tqdm": True}
    assert config.model.name_or_path == "tiny:critic"  # untouched keys keep the file's values
    assert parse_value("2") == 2 and parse_value("-3.5e2") == -350.0 and parse_value("cosine") == "cosine"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "training.learnin_rate=1",
            "--set training.learnin_rate: unknown config key. Did you mean training.learning_rate?",
        ),
        ("learning_rate=1", "Did you mean training.learning_rate?"),
        ("trainig.max_steps=3", "Did you mean training.max_steps?"),
        ("training.learning_rate", "write KEY=VALUE"),
        (
            "training.learning_rate=abc",
            "with --set training.learning_rate: 'training.learning_rate': Input should be a valid number",
        ),
        ("training.learning_rate=-1", "'training.learning_rate': Input should be greater than 0"),
    ],
)
def test_a_bad_set_names_the_key(tmp_path: Path, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SFTRunConfig.load(sft_yaml(tmp_path), sets=[value])
    assert expected in str(caught.value)


def test_set_reaches_grpo_and_its_cross_field_checks(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "grpo.yaml",
        {
            "output_dir": str(tmp_path / "g"),
            "model": {"name_or_path": "tiny:planner-sft"},
            "data": {"synthetic": 4},
        },
    )
    config = GRPORunConfig.load(path, sets=["training.num_generations=4", "reward.stepwise=false"])
    assert config.training.num_generations == 4 and config.reward.stepwise is False
    with pytest.raises(ConfigError, match=r"must be a multiple of num_generations \(3\)"):
        GRPORunConfig.load(path, sets=["training.num_generations=3"])
    result = CliRunner().invoke(app, ["train", "grpo", "--config", str(path), "--set", "reward.judg=x"])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)
    assert "Did you mean reward.judge?" in str(result.exception)


def test_config_keys_are_flags_as_in_trl(tmp_path: Path) -> None:
    args = [
        "--learning_rate",
        "1e-5",
        "--max-steps=7",
        "--bf16",
        "--finetune.lora.r",
        "4",
        "--num_train_epochs",
        "2",
    ]
    sets = flag_sets(args, SFTRunConfig)
    assert sets == [
        "training.learning_rate=1e-5",
        "training.max_steps=7",
        "training.bf16=true",
        "finetune.lora.r=4",
        "training.num_train_epochs=2",
    ]
    config = SFTRunConfig.load(sft_yaml(tmp_path), sets=sets)
    assert config.training.learning_rate == 1e-5 and config.training.max_steps == 7 and config.training.bf16
    with pytest.raises(
        ConfigError, match=r"--learnin_rate: unknown config key. Did you mean training.learning_rate"
    ):
        flag_sets(["--learnin_rate", "1"], SFTRunConfig)
    with pytest.raises(ConfigError, match="Unexpected argument 'stray'"):
        flag_sets(["stray"], SFTRunConfig)
    # Through the command: a flag's value is checked by the config model, before anything loads.
    for command in (
        ["train", "sft", "--config", str(sft_yaml(tmp_path))],
        ["train", "grpo", "--config", str(grpo_yaml(tmp_path))],
    ):
        result = CliRunner().invoke(app, [*command, "--learning_rate", "abc"])
        assert isinstance(result.exception, ConfigError), result.output
        assert "'training.learning_rate': Input should be a valid number" in str(result.exception)


def grpo_yaml(tmp: Path) -> Path:
    return write_yaml(
        tmp / "grpo.yaml",
        {
            "output_dir": str(tmp / "g"),
            "model": {"name_or_path": "tiny:planner-sft"},
            "data": {"synthetic": 4},
        },
    )


# --- TRL arguments ---------------------------------------------------------------------------------------------


def test_trl_arguments_use_current_names_and_keep_the_progress_bar(tmp_path: Path) -> None:
    from interleave_thinker.train.grpo.trainer import trl_config as grpo_trl_config
    from interleave_thinker.train.sft.trainer import trl_config as sft_trl_config

    sft = SFTRunConfig.load(sft_yaml(tmp_path), sets=["training.bf16=false", "training.use_cpu=true"])
    grpo = GRPORunConfig.load(
        write_yaml(
            tmp_path / "grpo.yaml",
            {"output_dir": str(tmp_path / "g"), "model": {"name_or_path": "x"}, "data": {"synthetic": 2}},
        ),
        sets=["training.bf16=false", "training.use_cpu=true", "training.gradient_checkpointing=true"],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sft_args = sft_trl_config(sft, tmp_path / "s", vision=True)
        grpo_args = grpo_trl_config(grpo, tmp_path / "g", [1.0])
    assert [str(w.message) for w in caught if "gradient_checkpointing" in str(w.message)] == []
    assert (
        sft_args.activation_checkpointing is True and sft_args.gradient_checkpointing is True
    )  # our default
    assert (
        grpo_args.activation_checkpointing is True
        and not sft_args.disable_tqdm
        and not grpo_args.disable_tqdm
    )
    quiet = SFTRunConfig.load(
        sft_yaml(tmp_path),
        sets=["training.gradient_checkpointing=false", "trl.disable_tqdm=true", "training.bf16=false"],
    )
    quiet_args = sft_trl_config(quiet, tmp_path / "s", vision=True)
    assert quiet_args.activation_checkpointing is False and quiet_args.disable_tqdm is True


# --- --resume of a finished run ---------------------------------------------------------------------------------


def fake_checkpoint(out: Path, step: int, epoch: float) -> None:
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": epoch}))


def test_finished_means_the_newest_checkpoint_reached_max_steps_or_the_epochs(tmp_path: Path) -> None:
    assert finished_at(tmp_path / "absent", 10, 1.0) is None
    fake_checkpoint(tmp_path, 5, 0.5)
    assert finished_at(tmp_path, 10, 3.0) is None
    fake_checkpoint(tmp_path, 10, 1.0)
    assert finished_at(tmp_path, 10, 3.0) == 10
    assert finished_at(tmp_path, 20, 3.0) is None  # max_steps raised: there is more to do
    assert finished_at(tmp_path, -1, 1.0) == 10 and finished_at(tmp_path, -1, 2.0) is None


# --- tiny runs through the CLI ---------------------------------------------------------------------------------


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run_recording_warnings(args: list[str]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, args)
        gc.collect()  # the trainer's leftovers are collected here, their warnings recorded with the run's
    return result, list(caught)


def ours(caught: list[warnings.WarningMessage]) -> list[str]:
    """Deprecation warnings our arguments cause: the old argument name, or raised from our own code."""
    return [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if issubclass(w.category, (FutureWarning, DeprecationWarning))
        and (OUR_ALIAS in str(w.message) or "/interleave_thinker/" in w.filename)
    ]


def resume_is_a_no_op(args: list[str], out: Path, weights: Path, step: int) -> None:
    before = digests(out)
    assert weights.is_file()
    result = CliRunner().invoke(app, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert f"already finished at step {step}; nothing to do" in result.output
    assert digests(out) == before  # weights, checkpoints and logs untouched
    assert not (out / f"checkpoint-{step + 1}").exists()


@pytest.mark.slow
def test_tiny_sft_shows_progress_warns_nothing_of_ours_and_resume_of_it_is_a_no_op(tmp_path: Path) -> None:
    data = tmp_path / "data"
    made = CliRunner().invoke(app, ["data", "synth", "--role", "critic", "--n", "8", "--out", str(data)])
    assert made.exit_code == 0, made.output
    out = tmp_path / "out"
    config = REPO / "configs" / "sft_critic_tiny.yaml"
    args = [
        "train",
        "sft",
        "--config",
        str(config),
        "--out",
        str(out),
        "--set",
        f"data.train=[{data / 'critic_sft.json'}]",
    ]
    args += [
        "--set",
        "training.max_steps=2",
        "--set",
        "training.save_steps=1",
        "--set",
        "training.gradient_checkpointing=true",
    ]
    result, caught = run_recording_warnings(args)
    assert result.exit_code == 0, result.output
    # logging_steps 5 (the config's) > 2 steps: no loss was logged, and the summary says so and why
    [line] = [x for x in result.stdout.splitlines() if x.startswith("trained 2 steps")]
    assert line.startswith(
        "trained 2 steps; no loss logged (logging_steps 5, 2 step(s) in this run); mean loss "
    )
    [logged] = re.findall(r"'train_loss': '([0-9.e+-]+)'", result.stdout)  # transformers' own metrics line
    assert float(line.rpartition(" ")[2]) == pytest.approx(float(logged), rel=1e-3)
    assert "2/2 [" in result.stderr  # tqdm's bar with elapsed time and ETA
    assert ours(caught) == []
    resume_is_a_no_op(args, out, out / "model.safetensors", 2)


@pytest.mark.slow
def test_tiny_grpo_resume_of_a_finished_run_is_a_no_op(tmp_path: Path) -> None:
    out = tmp_path / "grpo"
    # the role from --role alone (the config says none): the last lines name it
    config = tmp_path / "grpo_planner_tiny.yaml"
    shipped = (REPO / "configs" / "grpo_planner_tiny.yaml").read_text(encoding="utf-8")
    config.write_text(shipped.replace("role: planner\n", ""), encoding="utf-8")
    args = ["train", "grpo", "--role", "planner", "--config", str(config), "--out", str(out)]
    for key, value in [
        ("data.synthetic", 2),
        ("training.max_steps", 1),
        ("training.num_generations", 2),
        ("training.per_device_train_batch_size", 2),
        ("training.max_completion_length", 16),
    ]:
        args += ["--set", f"{key}={value}"]
    result, caught = run_recording_warnings(args)
    assert result.exit_code == 0, result.output
    assert "trained 1 steps" in result.stdout and "1/1 [" in result.stderr
    assert ours(caught) == []
    # TRL's read of transformers' deprecated alias, printed once per call site before: not shown
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
    # one layout for SFT and GRPO: the final model in output_dir, beside checkpoint-N
    assert f"model saved in {out}\nuse it with: --planner transformers:{out}\n" in result.stdout
    assert not (out / "final").exists() and (out / "checkpoint-1" / "model.safetensors").is_file()
    resume_is_a_no_op(args, out, out / "model.safetensors", 1)


@pytest.mark.slow
def test_tiny_grpo_summary_after_resume_counts_this_run_only(tmp_path: Path) -> None:
    out = tmp_path / "grpo"
    args = ["train", "grpo", "--config", str(REPO / "configs" / "grpo_planner_tiny.yaml"), "--out", str(out)]
    for key, value in [
        ("data.synthetic", 2),
        ("training.num_generations", 2),
        ("training.per_device_train_batch_size", 2),
        ("training.max_completion_length", 8),
        ("training.temperature", 1.5),
        ("training.save_steps", 1),
    ]:
        args += ["--set", f"{key}={value}"]
    first = CliRunner().invoke(app, [*args, "--set", "training.max_steps=1"])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(app, [*args, "--set", "training.max_steps=2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    history = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    [step_2] = [e["reward"] for e in history if e.get("step") == 2 and "reward" in e]
    assert [e["step"] for e in history if "reward" in e] == [1, 2]  # the first run's entry is still there
    expected = (
        f"trained 2 steps (1 in this run, from step 1); mean reward {step_2:.4g} -> {step_2:.4g} (1 logged)"
    )
    assert expected in resumed.stdout.splitlines()


def test_a_grpo_folder_in_the_old_layout_still_loads(tmp_path: Path) -> None:
    from interleave_thinker.backends._loading import resolve_checkpoint

    old, new = tmp_path / "old", tmp_path / "new"
    (old / "final").mkdir(parents=True)
    (old / "final" / "config.json").write_text("{}")
    (old / "checkpoint-2").mkdir()
    (new / "final").mkdir(parents=True)  # a model folder that merely holds a "final" folder is itself
    (new / "config.json").write_text("{}")
    assert resolve_checkpoint(str(old)) == str(old / "final")
    assert resolve_checkpoint(str(new)) == str(new)


def test_output_dir_names_one_folder_for_checkpoints_final_model_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL expands ``~`` in the checkpoints' folder; the config does too, so the final model lands beside
    them; and ``trl.output_dir`` (a second folder for the checkpoints only) is refused."""
    from interleave_thinker.train.grpo.trainer import trl_config as grpo_trl_config

    monkeypatch.setenv("HOME", str(tmp_path))
    sets = ("output_dir=~/runs/x", "training.use_cpu=true", "training.bf16=false", "training.report_to=none")
    grpo = GRPORunConfig.load(REPO / "configs" / "grpo_planner_tiny.yaml", sets=sets)
    sft = SFTRunConfig.load(REPO / "configs" / "sft_critic_tiny.yaml", sets=sets)
    assert grpo.output_dir == sft.output_dir == tmp_path / "runs" / "x"
    assert grpo_trl_config(grpo, grpo.output_dir, [1.0]).output_dir == str(tmp_path / "runs" / "x")
    grpo.trl = {"output_dir": str(tmp_path / "elsewhere")}
    with pytest.raises(ConfigError, match=r"trl\.output_dir: set output_dir at the top of the config"):
        grpo_trl_config(grpo, grpo.output_dir, [1.0])
