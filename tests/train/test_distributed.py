"""Distributed training that is run, not only configured: ``accelerate launch`` with two CPU processes
(gloo) on the tiny models, and the shipped DeepSpeed ZeRO-3 / FSDP configs loaded as far as a CPU allows.

Two processes are started with ``accelerate launch --multi_gpu --num_processes 2``: on a machine without
CUDA this is torchrun with the gloo backend (``--cpu`` alone starts a single process unless MPI is set up,
see docs/training-gpus.md). Two machines are two such launches on 127.0.0.1 (``--num_machines 2``,
machine ranks 0 and 1, one process each): SFT runs both ways, GRPO trains on two machines and resumes
as two processes of one machine. The children inherit ``os.environ`` (pinned numerics from conftest.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.common import REPO

TIMEOUT = 900
GROUP = 4
PER_DEVICE = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(processes: int, *args: str, cwd: Path) -> str:
    """Run the CLI in ``processes`` processes (1: plain python); returns stdout, fails with the output tail."""
    cli = ["-m", "interleave_thinker", *args]
    if processes == 1:
        command = [sys.executable, *cli]
    else:
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(free_port()),
            *cli,
        ]
    done = subprocess.run(
        command, cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert done.returncode == 0, failure_report(done.stdout + done.stderr)
    return done.stdout


def failure_report(output: str) -> str:
    """The lines that name a rank's failure wherever they are (torchrun's summary fills the tail), then the
    tail: a rank that aborts prints its reason well before the launcher's summary."""
    marks = ("Error", "error:", "terminate", "what()", "Traceback", "Signal", "Exception")
    cause = [line for line in output.splitlines() if any(m in line for m in marks)]
    return "\n".join(cause[-40:])[-4000:] + "\n--- tail ---\n" + output[-3000:]


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def trainer_state(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "trainer_state.json").read_text(encoding="utf-8")))


def replica_digests(output_dir: Path) -> dict[int, list[str]]:
    lines = (output_dir / "replicas.jsonl").read_text(encoding="utf-8").splitlines()
    return {int(e["step"]): list(e["digests"]) for e in map(json.loads, lines)}


# --- SFT --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sft_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("dist-sft")
    launch(1, "data", "synth", "--role", "critic", "--n", "16", "--out", str(work / "data"), cwd=work)
    return work


def sft_config(work: Path, name: str, per_device: int, max_steps: int) -> Path:
    return write_config(
        work / f"{name}.yaml",
        {
            "role": "critic",
            "output_dir": str(work / name),
            "model": {"name_or_path": "tiny:critic", "dtype": "float32", "image_max_pixels": None},
            "data": {"train": [str(work / "data" / "critic_sft.json")]},
            "training": {
                "learning_rate": 1e-2,
                "max_steps": max_steps,
                "warmup_ratio": 0.0,
                "lr_scheduler_type": "constant",
                "per_device_train_batch_size": per_device,
                "max_length": None,
                "bf16": False,
                "gradient_checkpointing": False,
                "save_steps": 2,
                "logging_steps": 1,
                "report_to": "none",
                "use_cpu": True,
                "replica_check_steps": 1,
            },
        },
    )


@pytest.fixture(scope="module")
def sft_two(sft_work: Path) -> tuple[Path, str]:
    """Four SFT steps in two processes, two examples each (global batch 4)."""
    out = launch(2, "train", "sft", "--config", str(sft_config(sft_work, "two", 2, 4)), cwd=sft_work)
    return sft_work / "two", out


@pytest.mark.slow
def test_sft_two_processes_follow_the_one_process_loss_curve(
    sft_work: Path, sft_two: tuple[Path, str]
) -> None:
    two, stdout = sft_two
    launch(1, "train", "sft", "--config", str(sft_config(sft_work, "one", 4, 4)), cwd=sft_work)

    def losses(folder: Path) -> list[float]:
        return [e["loss"] for e in trainer_state(folder / "checkpoint-4")["log_history"] if "loss" in e]

    one_losses, two_losses = losses(sft_work / "one"), losses(two)
    assert len(two_losses) == 4
    # Same samples per step (the sampler's order is shared, accelerate hands each rank half of every
    # batch); only padding and the order of float sums differ.
    assert two_losses == pytest.approx(one_losses, rel=1e-3)
    assert two_losses[-1] < two_losses[0]
    # Two ranks, equal weights after every step, and the weights moved.
    digests = replica_digests(two)
    assert sorted(digests) == [0, 1, 2, 3, 4]
    assert all(len(d) == 2 and d[0] == d[1] for d in digests.values())
    assert digests[4][0] != digests[0][0]
    # One report and one set of checkpoints (with each rank's RNG state), written by the main process.
    assert stdout.count("trained 4 steps") == 1
    assert sorted(p.name for p in two.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert {p.name for p in (two / "checkpoint-4").glob("rng_state_*.pth")} == {
        "rng_state_0.pth",
        "rng_state_1.pth",
    }
    assert (two / "model.safetensors").is_file()


@pytest.mark.slow
def test_sft_resume_from_a_two_process_checkpoint_continues_the_step_count(
    sft_work: Path, sft_two: tuple[Path, str]
) -> None:
    two, _ = sft_two
    config = sft_config(sft_work, "two", 2, 6)
    stdout = launch(2, "train", "sft", "--config", str(config), "--resume", cwd=sft_work)
    assert stdout.count("trained 6 steps") == 1
    history = trainer_state(two / "checkpoint-6")["log_history"]
    steps = [e["step"] for e in history if "loss" in e]
    assert steps == [1, 2, 3, 4, 5, 6]
    digests = replica_digests(two)
    assert digests[6][0] == digests[6][1] != digests[4][0]


# --- Two machines ------------------------------------------------------------------------------------


def machine_command(rank: int, port: int, cli: list[str], rendezvous_timeout: int) -> list[str]:
    """``accelerate launch`` of machine ``rank`` of two, one process each, meeting on 127.0.0.1:``port``."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_machines",
        "2",
        "--num_processes",
        "2",
        "--machine_rank",
        str(rank),
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(port),
        "--rdzv_conf",
        f"timeout={rendezvous_timeout}",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "interleave_thinker",
        *cli,
    ]


def start_machine(rank: int, port: int, cli: list[str], cwd: Path, rendezvous_timeout: int) -> Any:
    """Machine ``rank``'s ``accelerate launch``, started (stdout and stderr together)."""
    return subprocess.Popen(
        machine_command(rank, port, cli, rendezvous_timeout),
        cwd=cwd,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(started: list[Any]) -> list[Any]:
    """Wait for each started launcher; their results in the same order."""
    done = []
    for process in started:
        out, _ = process.communicate(timeout=TIMEOUT)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, ""))
    return done


def launch_machines(ranks: list[int], cli: list[str], cwd: Path, rendezvous_timeout: int = 120) -> list[Any]:
    """Start the given machine ranks of a two-machine run at once and wait for each."""
    port = free_port()
    return finish([start_machine(rank, port, cli, cwd, rendezvous_timeout) for rank in ranks])


def launch_two_machines(cli: list[str], cwd: Path) -> str:
    """Both machine ranks of a two-machine run; fails with a machine's output when either fails, else
    returns the two machines' output together."""
    done = launch_machines([0, 1], cli, cwd)
    for result in done:
        assert result.returncode == 0, failure_report(result.stdout)
    return "".join(result.stdout for result in done)


@pytest.mark.slow
def test_sft_on_two_machines_follows_the_two_process_loss_curve(
    sft_work: Path, sft_two: tuple[Path, str]
) -> None:
    """``accelerate launch --num_machines 2`` (machine ranks 0 and 1 on 127.0.0.1, gloo, one process each)
    trains as two processes of one machine do: the same losses, equal replicas, one report."""
    two, _ = sft_two
    config = sft_config(sft_work, "machines", 2, 4)
    output = launch_two_machines(["train", "sft", "--config", str(config)], sft_work)

    def losses(folder: Path) -> list[float]:
        return [e["loss"] for e in trainer_state(folder / "checkpoint-4")["log_history"] if "loss" in e]

    assert losses(sft_work / "machines") == pytest.approx(losses(two), rel=1e-4)
    digests = replica_digests(sft_work / "machines")
    assert all(len(d) == 2 and d[0] == d[1] for d in digests.values())
    assert output.count("trained 4 steps") == 1  # the main process of machine 0 reports
    assert (sft_work / "machines" / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_two_machine_run_missing_a_machine_rank_is_refused(sft_work: Path) -> None:
    """Machine rank 1 never starts: machine 0 does not train alone as a one-machine run, under ``train sft``
    nor ``train grpo``; it stops when the rendezvous times out, non-zero, before any process of ours runs
    (no output folder, so no model loaded). Both wait at once, so the check costs one timeout."""
    alone = {"sft": sft_work / "alone", "grpo": sft_work / "alone-grpo"}
    commands = {
        "sft": ["train", "sft", "--config", str(sft_config(sft_work, "alone", 2, 2))],
        "grpo": ["train", "grpo", "--config", str(REPO / "configs" / "grpo_critic_tiny.yaml")],
    }
    commands["grpo"] += ["--out", str(alone["grpo"])]
    started = [
        start_machine(0, free_port(), cli, sft_work, rendezvous_timeout=2) for cli in commands.values()
    ]
    for name, result in zip(commands, finish(started), strict=True):
        assert result.returncode != 0, name
        assert "1/2 clients joined" in result.stdout, failure_report(result.stdout)
        assert "trained" not in result.stdout
        assert not alone[name].exists()


def test_the_slurm_script_launches_one_machine_rank_per_node(tmp_path: Path) -> None:
    """``examples/slurm/train.sbatch`` run with a stand-in ``srun`` / ``scontrol`` / ``accelerate`` on PATH:
    each node's task gets its machine rank from ``SLURM_NODEID``, the first node's name as the meeting point
    and the process count of all nodes; accelerate's own parser reads that command line."""
    from accelerate.commands.launch import launch_command_parser

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        # srun runs its command once per node, as SLURM does with one task per node
        "srun": 'shift; for n in 0 1; do SLURM_NODEID=$n "$@"; done',
        # the first name, then more names than a pipe holds (as a long node list): a reader that stops after
        # the first line makes this scontrol die of SIGPIPE, every time and with no timing involved
        "scontrol": "echo node-a; seq 1 200000",
        "accelerate": 'printf "%s\\n" "$@" > "$OUT/node-$SLURM_NODEID.args"',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n", encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = dict(
        os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(tmp_path), SLURM_JOB_NODELIST="node-[a-b]"
    )
    env |= {
        "SLURM_NNODES": "2",
        "COMMAND": "grpo",
        "CONFIG": "configs/grpo_critic.yaml",
        "GPUS_PER_NODE": "4",
    }
    script = REPO / "examples" / "slurm" / "train.sbatch"
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        argv = (tmp_path / f"node-{rank}.args").read_text(encoding="utf-8").splitlines()
        assert argv[0] == "launch"
        args = launch_command_parser().parse_args(argv[1:])
        assert (args.num_machines, args.num_processes, args.machine_rank) == (2, 8, rank)
        assert (args.main_process_ip, args.main_process_port) == ("node-a", 29500)
        assert args.config_file == "configs/accelerate/deepspeed_zero3_multinode.yaml"
        assert args.module and args.training_script == "interleave_thinker"
        assert args.training_script_args == [
            "train",
            "grpo",
            "--role",
            "critic",
            "--config",
            "configs/grpo_critic.yaml",
        ]


def test_grpo_use_vllm_reaches_trl_as_server_mode(tmp_path: Path) -> None:
    """Config only: a run needs a GPU and ``trl vllm-serve`` (docs/training-gpus.md)."""
    from interleave_thinker.train.grpo import GRPORunConfig
    from interleave_thinker.train.grpo.trainer import trl_config

    sets = (
        "training.use_vllm=true",
        "training.vllm_server_base_url=http://node-a:8000",
        "training.bf16=false",
        "training.use_cpu=true",
        "training.report_to=none",
    )
    config = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=sets)
    args = trl_config(config, tmp_path, [1.0])
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_base_url) == (
        True,
        "server",
        "http://node-a:8000",
    )


# --- GRPO -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def format_trained_critic() -> Path:
    """Built (or found) once here, so the two ranks only load it."""
    from interleave_thinker.core.prompt_store import builtin_templates
    from interleave_thinker.tiny.format_trained import ensure_format_trained

    return ensure_format_trained("critic", templates=builtin_templates())


@pytest.mark.slow
def test_grpo_on_two_machines_logs_each_rollout_once_with_whole_groups_and_resumes(
    tmp_path: Path, format_trained_critic: Path
) -> None:
    """``train grpo`` on two machine ranks of one process each (127.0.0.1, gloo): the rollouts of both
    machines are logged once, by the main process of machine 0, in whole groups; the replicas stay equal.
    Every process here is its machine's local main process, so what only the global main process may do
    (report, log, save) is told apart from what every machine does, which two processes of one machine
    cannot show. ``--resume`` then continues the two-machine checkpoint as two processes of one machine
    (the same ranks, so the same per-rank RNG states), which runs GRPO's one-machine path too."""
    pd = pytest.importorskip("pandas")
    steps = 2
    config = write_config(
        tmp_path / "grpo.yaml",
        {
            "role": "critic",
            "output_dir": str(tmp_path / "grpo"),
            "model": {"name_or_path": str(format_trained_critic), "image_max_pixels": 16384},
            "data": {"synthetic": 8},
            "reward": {"stepwise": False},
            "training": {
                "learning_rate": 1e-3,
                "num_generations": GROUP,
                "per_device_train_batch_size": PER_DEVICE,
                "max_steps": steps,
                "max_completion_length": 64,
                "bf16": False,
                "use_cpu": True,
                "save_steps": steps,
                "logging_steps": 1,
                "report_to": "none",
                "replica_check_steps": 1,
            },
            "trl": {"log_completions": True, "num_completions_to_print": 1},
        },
    )
    stdout = launch_two_machines(["train", "grpo", "--config", str(config)], tmp_path)
    out = tmp_path / "grpo"
    assert stdout.count(f"trained {steps} steps") == 1
    logs = [e for e in trainer_state(out / f"checkpoint-{steps}")["log_history"] if "reward" in e]
    assert [e["step"] for e in logs] == list(range(1, steps + 1))
    assert all("kl" in e for e in logs)
    for entry in logs:
        table = pd.read_parquet(out / "completions" / f"completions_{entry['step']:05d}.parquet")
        # Every rollout of the step once: 2 machines x PER_DEVICE completions, no row twice.
        assert len(table) == 2 * PER_DEVICE
        prompts = [str(p) for p in table["prompt"]]
        # Groups stay whole: consecutive runs of GROUP rows share one prompt, and groups differ.
        groups = [prompts[i : i + GROUP] for i in range(0, len(prompts), GROUP)]
        assert all(len(set(g)) == 1 for g in groups)
        assert len({g[0] for g in groups}) == len(groups)
        # The logged mean reward is the mean over exactly these rollouts (weights 0.5 / 0.5).
        rewards = 0.5 * table["critic_format"] + 0.5 * table["critic_accuracy"]
        assert entry["reward"] == pytest.approx(float(rewards.mean()), abs=1e-6)
    assert any(e["reward_std"] > 0 for e in logs), "no reward varied, so no update happened"
    digests = replica_digests(out)
    assert sorted(digests) == list(range(steps + 1))
    assert all(d[0] == d[1] for d in digests.values())
    assert digests[steps][0] != digests[0][0]
    assert (out / "model.safetensors").is_file()
    # Resume from the two-machine checkpoint on one machine: one more step, counted from where it stopped.
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["training"]["max_steps"] = steps + 1
    write_config(config, settings)
    stdout = launch(2, "train", "grpo", "--config", str(config), "--resume", cwd=tmp_path)
    assert stdout.count(f"trained {steps + 1} steps") == 1
    digests = replica_digests(out)
    assert digests[steps + 1][0] == digests[steps + 1][1]
    assert (out / "completions" / f"completions_{steps + 1:05d}.parquet").is_file()


# --- Shipped DeepSpeed ZeRO-3 and FSDP configs --------------------------------------------------------


def launch_env(config_file: Path, *flags: str) -> tuple[Any, dict[str, str]]:
    """What ``accelerate launch --config_file FILE FLAGS`` parses and puts into each process's environment
    (torchrun's per-node arguments are set on the parsed arguments)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(config_file), *flags, "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        fields = [*defaults.deepspeed_config, "mixed_precision"]
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        env = prepare_deepspeed_cmd_env(args)[1]
    else:
        env = prepare_multi_gpu_env(args)
    return args, {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def shipped_trl_configs(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[Any]:
    """TRL's SFTConfig and GRPOConfig for the shipped 8B configs, validated by TrainingArguments under
    ``env``. Only ``use_cpu`` is changed: without it bf16 is refused on a machine without a GPU."""
    from interleave_thinker.train.grpo import GRPORunConfig
    from interleave_thinker.train.grpo.trainer import trl_config as grpo_trl_config
    from interleave_thinker.train.sft.config import SFTRunConfig
    from interleave_thinker.train.sft.trainer import trl_config as sft_trl_config

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sft = SFTRunConfig.load(REPO / "configs" / "sft_critic.yaml")
    sft.training.use_cpu = True
    grpo = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml")
    grpo.training.use_cpu = True
    return [
        sft_trl_config(sft, Path("unused"), vision=True),
        grpo_trl_config(grpo, Path("unused"), [1.0, 0.0, 0.0, 0.0, 0.0]),
    ]


@pytest.mark.slow
def test_shipped_fsdp_config_loads_and_wraps_the_qwen3_vl_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked: accelerate's launcher parses the file; its FSDP plugin builds from the environment the
    launcher sets; the wrapped layer classes exist in Qwen3-VL (the tiny model has the 8B's classes);
    TRL's SFT and GRPO configs validate under that environment. Not run here: ``SFTTrainer(...)`` /
    ``GRPOTrainer(...)``, whose Accelerator needs a process group of CUDA devices to shard onto."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from transformers import AutoModelForImageTextToText

    from interleave_thinker.tiny.models import ensure_tiny_models

    args, env = launch_env(REPO / "configs" / "accelerate" / "fsdp.yaml")
    assert args.use_fsdp and args.num_processes == 8 and args.mixed_precision == "bf16"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.cpu_ram_efficient_loading
    model = AutoModelForImageTextToText.from_pretrained(ensure_tiny_models().critic)
    classes = {type(module).__name__ for module in model.modules()}
    assert plugin.transformer_cls_names_to_wrap
    assert set(plugin.transformer_cls_names_to_wrap) <= classes
    sft, grpo = shipped_trl_configs(monkeypatch, env)
    assert sft.bf16 and sft.gradient_checkpointing and grpo.bf16 and grpo.num_generations == 8


@pytest.mark.slow
def test_shipped_deepspeed_zero3_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked: accelerate's launcher parses the file and its DeepSpeed plugin builds the ZeRO-3 JSON from
    the launcher's environment; TRL's SFT and GRPO configs validate (without the DeepSpeed variables:
    TrainingArguments then imports deepspeed, which is not installed here). Not checked: deepspeed's own
    validation of that JSON, ZeRO-3 initialisation and the trainer's engine, which need deepspeed and GPUs."""
    from accelerate.utils import DeepSpeedPlugin

    args, env = launch_env(REPO / "configs" / "accelerate" / "deepspeed_zero3.yaml")
    assert args.use_deepspeed and args.num_processes == 8 and args.mixed_precision == "bf16"
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin()
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert plugin.deepspeed_config["gradient_clipping"] == 1.0
    assert plugin.zero3_init_flag
    for key in env:
        monkeypatch.delenv(key)
    sft, grpo = shipped_trl_configs(monkeypatch, {})
    assert sft.bf16 and grpo.bf16


@pytest.mark.parametrize("single", ["deepspeed_zero3.yaml", "fsdp.yaml"])
def test_shipped_multi_node_configs_leave_the_machine_rank_and_address_to_the_launcher(single: str) -> None:
    """``configs/accelerate/*_multinode.yaml``: two machines of 8 processes, no machine rank or main
    address in the file (each node's launch passes its own), the single-node file's sharding settings,
    and what accelerate makes of a node's launch: torchrun with 2 nodes, that node's rank and node 0's
    address. For DeepSpeed that needs ``deepspeed_multinode_launcher: standard``: with the single-node file
    the same flags start ``deepspeed --launcher pdsh`` on every node (no ``nnodes`` for torchrun)."""
    folder = REPO / "configs" / "accelerate"
    multi = folder / single.replace(".yaml", "_multinode.yaml")
    settings = yaml.safe_load(multi.read_text(encoding="utf-8"))
    assert (settings["num_machines"], settings["num_processes"]) == (2, 16)
    assert not {"machine_rank", "main_process_ip"} & set(settings)
    one_node = yaml.safe_load((folder / single).read_text(encoding="utf-8"))
    sharding = "deepspeed_config" if "deepspeed" in single else "fsdp_config"
    launcher = settings[sharding].pop("deepspeed_multinode_launcher", None)
    assert launcher == ("standard" if sharding == "deepspeed_config" else None)
    per_run = {"num_machines", "num_processes", "machine_rank", "main_process_port"}
    assert {k: v for k, v in settings.items() if k not in per_run} == {
        k: v for k, v in one_node.items() if k not in per_run
    }
    node = ("--machine_rank", "1", "--main_process_ip", "node-a")
    args, env = launch_env(multi, *node)
    assert (args.use_deepspeed, args.use_fsdp) == (sharding == "deepspeed_config", sharding == "fsdp_config")
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "8", 1)
    assert (args.rdzv_endpoint, args.rdzv_backend) == ("node-a:29500", "static")
    assert env and args.mixed_precision == "bf16"
    if sharding == "deepspeed_config":
        single_args, _ = launch_env(folder / single, "--num_machines", "2", "--num_processes", "16", *node)
        assert not hasattr(single_args, "nnodes") and single_args.deepspeed_multinode_launcher == "pdsh"
