"""Tokens/s and peak memory of the tiny planner SFT run, padded batches vs padding-free packing.

TRL supports padding-free (BFD) packing only for text-only data, so the benchmark trains the tiny
planner on synthetic narrative conversations (no images). Each mode runs in its own process so the
peak resident memory (ru_maxrss) belongs to that mode alone.

    .venv/bin/python benchmarks/bench_sft.py [--steps 20] [--n 64]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

MODES: dict[str, tuple[dict[str, object], int | None]] = {
    "padded": ({}, 4096),
    "padding-free": ({"padding_free": True}, None),  # TRL enforces no max_length without packing
    "padding-free packing": ({"packing": True, "packing_strategy": "bfd"}, 2048),
}
"""Mode -> (extra trl.SFTConfig fields, max_length)."""


def run_mode(mode: str, steps: int, n: int, work: Path) -> dict[str, float]:
    from interleave_thinker.core.prompt_store import builtin_templates
    from interleave_thinker.train.data.trl_format import sft_dataset
    from interleave_thinker.train.sft.config import DataSection, ModelSection, SFTRunConfig, TrainingSection
    from interleave_thinker.train.sft.trainer import run_sft
    from interleave_thinker.train.synthetic import planner_examples

    data = work / "planner_text"
    sft_dataset(planner_examples(builtin_templates(), n, seed=0)).remove_columns("images").save_to_disk(
        str(data)
    )
    config = SFTRunConfig(
        output_dir=work / mode.replace(" ", "-"),
        model=ModelSection(name_or_path="tiny:planner", dtype="float32", image_max_pixels=None),
        data=DataSection(train=[data]),
        training=TrainingSection(
            learning_rate=1e-3,
            max_steps=steps,
            per_device_train_batch_size=4,
            max_length=MODES[mode][1],
            bf16=False,
            gradient_checkpointing=False,
            save_steps=10 * steps,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
        ),
        trl=MODES[mode][0],
    )
    result = run_sft(config)
    logged = [h for h in result.log_history if "num_tokens" in h]
    runtime = next(h["train_runtime"] for h in result.log_history if "train_runtime" in h)
    tokens = float(logged[-1]["num_tokens"]) if logged else 0.0
    return {
        "tokens_per_s": round(tokens / runtime, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "seconds": round(runtime, 2),
        "final_loss": round(result.losses[-1], 4) if result.losses else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--mode", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.steps, args.n, args.work)))
        return
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--mode",
                    mode,
                    "--steps",
                    str(args.steps),
                    "--n",
                    str(args.n),
                    "--work",
                    tmp,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"tiny planner SFT on CPU, {args.steps} steps, batch 4, text-only synthetic data")
    print(f"{'':16}" + "".join(f"{m:>22}" for m in rows))
    for key, label in (
        ("tokens_per_s", "tokens/s"),
        ("peak_rss_mb", "peak RSS (MB)"),
        ("seconds", "wall time (s)"),
        ("final_loss", "final loss"),
    ):
        print(f"{label:16}" + "".join(f"{rows[m][key]:>22}" for m in rows))


if __name__ == "__main__":
    main()
