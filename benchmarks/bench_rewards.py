"""One GRPO-sized reward batch (16 prompts x 8 rollouts = 128) with latency-simulating backends.

Compares sequential scoring (one rollout after another, no cache, as a plain loop would do) with our
concurrent, cached StepwiseScorer, against the capacity lower bound. Run: python benchmarks/bench_rewards.py
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from pathlib import Path

from PIL import Image

from _sim import SimImage, SimVLM
from interleave_thinker.agents.judge import Judge
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.train.rewards import CriticReward, StepwiseScorer

GEN_LATENCY, GEN_CAPACITY = 0.150, 8
JUDGE_LATENCY, JUDGE_CAPACITY = 0.040, 16
PROMPTS, ROLLOUTS = 16, 8


def batch(folder: Path) -> tuple[list[str], dict[str, list[object]]]:
    rng = random.Random(0)
    before = folder / "before.png"
    Image.new("RGB", (64, 64), (40, 80, 120)).save(before)
    completions: list[str] = []
    columns: dict[str, list[object]] = {
        k: [] for k in ("ground_truth", "origin_prompt", "origin_image_path", "previous_prompt")
    }
    for p in range(PROMPTS):
        failed = p % 4 != 0  # a quarter of the recorded attempts were successes: no regeneration
        for _r in range(ROLLOUTS):
            refine = f"prompt {p} variant {rng.randint(0, 2)}"  # rollouts often agree on the refinement
            completions.append(
                f"<think>r</think><answer>{{'previous_step_success': False, 'refine_prompt': '{refine}'}}</answer>"
            )
            columns["ground_truth"].append({"success": not failed, "semantics": 5, "quality": 6})
            columns["origin_prompt"].append(f"prompt {p}")
            columns["origin_image_path"].append(str(before))
            columns["previous_prompt"].append(f"prompt {p}")
    return completions, columns


def judge_reply(messages: list[dict[str, object]]) -> str:
    return '{"score": [7, 8]}'


def run(concurrent: bool, completions: list[str], columns: dict[str, list[object]]) -> dict[str, float]:
    generator = SimImage(GEN_LATENCY, GEN_CAPACITY)
    judge_vlm = SimVLM(judge_reply, JUDGE_LATENCY, JUDGE_CAPACITY)
    judge = Judge(judge_vlm, builtin_templates())
    start = time.perf_counter()
    if concurrent:
        scorer = StepwiseScorer(
            generator, judge, generator_concurrency=GEN_CAPACITY, judge_concurrency=JUDGE_CAPACITY
        )
        rewards = CriticReward(scorer)(None, completions, **columns)
        hits, misses = scorer.cache.hits, scorer.cache.misses
        scorer.close()
    else:
        rewards, hits, misses = [], 0, 0
        for i, completion in enumerate(completions):
            scorer = StepwiseScorer(generator, judge, generator_concurrency=1, judge_concurrency=1)
            rewards += CriticReward(scorer)(None, [completion], **{k: [v[i]] for k, v in columns.items()})
            misses += scorer.cache.misses
            scorer.close()
    wall = time.perf_counter() - start
    return {
        "wall": wall,
        "generations": generator.sim.calls,
        "judge_calls": judge_vlm.sim.calls,
        "hits": hits,
        "misses": misses,
        "gen_util": generator.sim.utilisation(wall),
        "judge_util": judge_vlm.sim.utilisation(wall),
        "mean_reward": sum(rewards) / len(rewards),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        completions, columns = batch(Path(tmp))
        sequential = run(False, completions, columns)
        ours = run(True, completions, columns)
    generations = ours["generations"]
    # Makespan lower bound: identical jobs on `capacity` slots take ceil(n / capacity) waves; every
    # sample's chain is generate, then SC and PQ (which run concurrently).
    bound = max(
        math.ceil(generations / GEN_CAPACITY) * GEN_LATENCY + JUDGE_LATENCY,
        GEN_LATENCY + math.ceil(ours["judge_calls"] / JUDGE_CAPACITY) * JUDGE_LATENCY,
    )
    print(
        f"batch: {len(completions)} rollouts; generator {GEN_LATENCY * 1000:.0f} ms x{GEN_CAPACITY}, judge {JUDGE_LATENCY * 1000:.0f} ms x{JUDGE_CAPACITY}"
    )
    print(f"{'':24}{'sequential':>12}{'ours':>12}")
    for key in (
        "wall",
        "generations",
        "judge_calls",
        "hits",
        "misses",
        "gen_util",
        "judge_util",
        "mean_reward",
    ):
        print(f"{key:24}{sequential[key]:>12.3f}{ours[key]:>12.3f}")
    print(f"capacity bound (s)      {bound:>24.3f}")
    print(f"ours / bound            {ours['wall'] / bound:>24.2f}   (goal <= 1.2)")
    print(f"sequential / ours       {sequential['wall'] / ours['wall']:>24.1f}x")
    assert abs(sequential["mean_reward"] - ours["mean_reward"]) < 1e-9, "concurrency changed the rewards"


if __name__ == "__main__":
    main()
