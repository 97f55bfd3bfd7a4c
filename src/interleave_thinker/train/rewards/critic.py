"""The critic's GRPO reward, as released: format, accuracy and a step-wise regeneration reward.

``overall = 0.5 * format + 0.5 * (0.2 * accuracy + 0.6 * semantic + 0.2 * quality)``, where semantic
and quality compare a regeneration with the critic's refined prompt against the recorded attempt's
judge scores. Weights and the per-sample deadline (70 s) are parameters.

Example::

    >>> critic_format_reward(None, ["<think>ok</think> <answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>"])
    [1.0]
    >>> critic_accuracy_reward(None, ["<answer>{'previous_step_success': False, 'refine_prompt': 'x'}</answer>"],
    ...                        ground_truth=[{"success": True, "semantics": 8, "quality": 9}])
    [0.0]
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker.agents.judge import Judge, Judgement, judge_inputs
from interleave_thinker.agents.preflight import check_generator, check_judgement, probe_image, served
from interleave_thinker.backends.protocols import ImageBackend, ImageRequest
from interleave_thinker.backends.wrapping import backend_spec
from interleave_thinker.core.images import is_white_canvas, open_rgb
from interleave_thinker.train.rewards._columns import GroundTruth, column, completion_text
from interleave_thinker.train.rewards.answers import CriticReading, read_critic
from interleave_thinker.train.rewards.cache import GenerationCache, generation_key


def critic_format_reward(prompts: Any, completions: list[Any], **columns: Any) -> list[float]:
    """1.0 when the response has a valid ``<answer>`` with a bool and a string field (``<think>`` before it, if any).

    The answer is read in the models' dialects, as the release's ``json_repair`` reads them
    (:mod:`interleave_thinker.train.rewards.answers`).
    """
    return [1.0 if read_critic(completion_text(c)).format_ok else 0.0 for c in completions]


def critic_accuracy_reward(prompts: Any, completions: list[Any], **columns: Any) -> list[float]:
    """1.0 when the predicted ``previous_step_success`` equals ``ground_truth.success`` (as the release
    compares: ``==``); 0.0 if different or missing."""
    truths = column(columns, "ground_truth", len(completions), "evaluation")
    return [
        read_critic(completion_text(c)).accuracy(GroundTruth.parse(t).success)
        for c, t in zip(completions, truths, strict=True)
    ]


@dataclass(frozen=True)
class CriticRewardWeights:
    """The release's mix: ``format * fmt + (1 - format) * (accuracy, semantic, quality weighted)``."""

    format: float = 0.5
    """Share of the total for a reply in the verdict format; the rest is the inner, weighted sum."""
    accuracy: float = 0.2
    """Inner weight of predicting ``previous_step_success`` as labelled."""
    semantic: float = 0.6
    """Inner weight of the regenerated image's semantic consistency (judge SC, step-wise part)."""
    quality: float = 0.2
    """Inner weight of the regenerated image's perceptual quality (judge PQ, step-wise part)."""

    def overall(self, fmt: float, accuracy: float, semantic: float, quality: float) -> float:
        inner = self.accuracy * accuracy + self.semantic * semantic + self.quality * quality
        return self.format * fmt + (1 - self.format) * inner


@dataclass
class StepwiseOutcome:
    """One sample's step-wise part: scored, skipped (ground truth success) or failed (0.5 each, ``error`` set)."""

    semantic: float = 0.5
    quality: float = 0.5
    regenerated: bool = False
    cache_hit: bool = False
    sc_new: float | None = None
    pq_new: float | None = None
    error: str | None = None
    seconds: float = 0.0
    skipped: bool = False
    """True when the recorded attempt succeeded: nothing is generated and 0.5 each is the rule, not a failure."""

    @property
    def status(self) -> str:
        """``skipped``, ``failed`` or ``scored`` (the counts GRPO logs as ``stepwise/<status>``)."""
        return "skipped" if self.skipped else "failed" if self.error is not None else "scored"


@dataclass
class StepwiseTally:
    """Step-wise samples judged (not skipped) and failed since the last :meth:`StepwiseScorer.take_tally`,
    with each failure's first line counted under the backend that failed it: ``judge`` once the image was
    regenerated, ``generator`` before (GRPO's failure budget reads it, ``reward.max_failure_share``)."""

    judged: int = 0
    failed: int = 0
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, outcomes: list[StepwiseOutcome]) -> None:
        for outcome in outcomes:
            if outcome.skipped:
                continue
            self.judged += 1
            if outcome.error is not None:
                self.failed += 1
                role = "judge" if outcome.regenerated else "generator"
                self.errors[role, outcome.error.strip().split("\n", 1)[0][:300]] += 1

    def merge(self, other: StepwiseTally) -> None:
        self.judged += other.judged
        self.failed += other.failed
        self.errors.update(other.errors)


@dataclass
class StepwiseScorer:
    """Regenerates with the refined prompt and judges it; concurrent under backend limits, cached."""

    generator: ImageBackend
    judge: Judge
    deadline: float = 70.0
    seed: int = 0
    size: tuple[int, int] | None = None
    generator_concurrency: int = 4
    judge_concurrency: int = 8
    sample_concurrency: int | None = None
    """Samples scored at once (None: all of the batch); 1 with both pools at 1 is fully sequential."""
    cache: GenerationCache = field(default_factory=GenerationCache)
    base_dir: Path | None = None

    def __post_init__(self) -> None:
        self._generate_pool = ThreadPoolExecutor(self.generator_concurrency, thread_name_prefix="reward-gen")
        self._judge_pool = ThreadPoolExecutor(self.judge_concurrency, thread_name_prefix="reward-judge")
        self._judge_cache: dict[str, Future[Judgement]] = {}
        self._judge_lock = threading.Lock()
        self._tally = StepwiseTally()

    def take_tally(self) -> StepwiseTally:
        """The samples judged and failed since the last call (a fresh count starts)."""
        with self._judge_lock:
            tally, self._tally = self._tally, StepwiseTally()
        return tally

    def score_batch(
        self,
        refine_prompts: list[str],
        truths: list[GroundTruth],
        origin_prompts: list[str],
        befores: list[str],
    ) -> list[StepwiseOutcome]:
        """One outcome per sample, in order; every sample runs at once, each within the deadline."""
        width = max(1, min(len(truths), self.sample_concurrency or len(truths)))
        with ThreadPoolExecutor(width, thread_name_prefix="reward-sample") as samples:
            futures = [
                samples.submit(self.score_one, p, t, o, b)
                for p, t, o, b in zip(refine_prompts, truths, origin_prompts, befores, strict=True)
            ]
            outcomes = [f.result() for f in futures]
        with self._judge_lock:
            self._tally.add(outcomes)
        return outcomes

    def score_one(
        self, prompt: str, truth: GroundTruth, origin_prompt: str, before_path: str
    ) -> StepwiseOutcome:
        outcome = StepwiseOutcome()
        if truth.success:
            outcome.skipped = True
            return outcome
        start = time.monotonic()
        try:
            before = open_rgb(self._resolve(before_path))
            source = None if is_white_canvas(before) else before
            size = self.size or before.size
            key = generation_key(prompt, source, self.seed, size)
            generation, outcome.cache_hit = self.cache.get_or_start(
                key, lambda: self._generate(prompt, source, size), self._generate_pool
            )
            after = generation.result(timeout=self._left(start))
            outcome.regenerated = True
            sc_future, pq_future = self._judged(key, origin_prompt, before, after)
            sc, pq = sc_future.result(timeout=self._left(start)), pq_future.result(timeout=self._left(start))
            if sc.sc is None or pq.pq is None:
                raise RuntimeError("; ".join(e for e in (sc.error, pq.error) if e) or "judge failed")
            outcome.sc_new, outcome.pq_new = sc.sc, pq.pq
            outcome.semantic = ((sc.sc - truth.semantics) / 10 + 1) / 2
            outcome.quality = ((pq.pq - truth.quality) / 10 + 1) / 2
        except FutureTimeout:
            outcome.semantic = outcome.quality = 0.5
            outcome.error = f"deadline of {self.deadline:g}s exceeded"
        except Exception as exc:  # any failure scores 0.5 each, as released; the reason is kept
            outcome.semantic = outcome.quality = 0.5
            outcome.error = f"{type(exc).__name__}: {exc}"
        outcome.seconds = round(time.monotonic() - start, 4)
        return outcome

    def _left(self, start: float) -> float:
        left = self.deadline - (time.monotonic() - start)
        if left <= 0:
            raise FutureTimeout()
        return left

    def _resolve(self, path: str) -> str:
        p = Path(path)
        return str(self.base_dir / p) if self.base_dir is not None and not p.is_absolute() else str(p)

    def _generate(self, prompt: str, source: Image.Image | None, size: tuple[int, int]) -> Image.Image:
        request = ImageRequest(prompt, image=source, width=size[0], height=size[1], seed=self.seed)
        return self.generator.generate(request)

    def _judged(
        self, key: str, instruction: str, before: Image.Image, after: Image.Image
    ) -> tuple[Future[Judgement], Future[Judgement]]:
        """SC and PQ run concurrently, once per (generation, instruction); PQ once per generation and
        "before" size, since both judge the regeneration resized to the "before" image as released."""
        before, after = judge_inputs(before, after)
        with self._judge_lock:
            sc_key = f"sc\0{key}\0{instruction}"
            pq_key = f"pq\0{key}\0{before.size[0]}x{before.size[1]}"
            if sc_key not in self._judge_cache:
                self._judge_cache[sc_key] = self._judge_pool.submit(
                    self.judge.semantic, before, after, instruction
                )
            if pq_key not in self._judge_cache:
                self._judge_cache[pq_key] = self._judge_pool.submit(self.judge.quality, after)
            return self._judge_cache[sc_key], self._judge_cache[pq_key]

    def close(self) -> None:
        self._generate_pool.shutdown(wait=False, cancel_futures=True)
        self._judge_pool.shutdown(wait=False, cancel_futures=True)


PROBE_SIDE = 256
"""Side of the preflight image when the reward regenerates at the "before" image's size."""


def preflight_stepwise(scorer: StepwiseScorer) -> list[str]:
    """One image from a served generator and one SC + PQ judgement from a served judge (a drawn image
    when the generator runs here); the first failure raises a BackendError naming the spec. Returns the
    roles checked."""
    width, height = scorer.size or (PROBE_SIDE, PROBE_SIDE)
    checked: list[str] = []
    generator = backend_spec(scorer.generator)
    if generator is not None and served(generator):
        after = check_generator(generator, scorer.generator, width, height)
        checked.append("generator")
    else:
        after = probe_image(width, height)
    judge = backend_spec(scorer.judge.backend)
    if judge is not None and served(judge):
        check_judgement(judge, scorer.judge, after)
        checked.append("judge")
    return checked


def refine_prompt_of(reading: CriticReading, previous_prompt: str) -> str:
    """The refine prompt read from the normalised response, or the previous prompt when it is empty."""
    refine = reading.refine_prompt
    return refine if isinstance(refine, str) and refine.strip() else previous_prompt


STEPWISE_STATUSES = ("scored", "skipped", "failed")


class CriticReward:
    """The release's total critic reward as one TRL reward function; components kept for logging."""

    __name__ = "critic_reward"

    def __init__(self, scorer: StepwiseScorer, weights: CriticRewardWeights | None = None) -> None:
        self.scorer = scorer
        self.weights = weights or CriticRewardWeights()
        self.last_components: list[dict[str, Any]] = []
        self.last_counts: dict[str, int] = dict.fromkeys(STEPWISE_STATUSES, 0)
        self.last_seconds = 0.0

    def __call__(self, prompts: Any, completions: list[Any], **columns: Any) -> list[float]:
        start = time.monotonic()
        n = len(completions)
        truths = [GroundTruth.parse(t) for t in column(columns, "ground_truth", n, "evaluation")]
        previous = column(columns, "previous_prompt", n, "rewritten_prompt")
        readings = [read_critic(completion_text(c)) for c in completions]  # each rollout read once
        refine = [refine_prompt_of(r, p or "") for r, p in zip(readings, previous, strict=True)]
        formats = [1.0 if r.format_ok else 0.0 for r in readings]
        accuracies = [r.accuracy(t.success) for r, t in zip(readings, truths, strict=True)]
        stepwise = self.scorer.score_batch(
            refine, truths, column(columns, "origin_prompt", n), column(columns, "origin_image_path", n)
        )
        self.last_components = []
        rewards = []
        for fmt, acc, step in zip(formats, accuracies, stepwise, strict=True):
            total = self.weights.overall(fmt, acc, step.semantic, step.quality)
            rewards.append(total)
            self.last_components.append(
                {
                    "overall": total,
                    "format": fmt,
                    "accuracy": acc,
                    "semantic": step.semantic,
                    "quality": step.quality,
                }
                | {k: v for k, v in asdict(step).items() if k not in ("semantic", "quality")}
            )
        self.last_counts = {name: sum(s.status == name for s in stepwise) for name in STEPWISE_STATUSES}
        log_metric = columns.get("log_metric")
        if callable(log_metric):  # TRL's GRPOTrainer: averaged over the logging steps, like its own metrics
            for name, count in self.last_counts.items():
                log_metric(f"stepwise/{name}", float(count))
        self.last_seconds = time.monotonic() - start
        return rewards

    def component(self, name: str) -> Any:
        """A TRL reward function that reports one component of the last call (for separate logging)."""

        def reward(prompts: Any, completions: list[Any], **columns: Any) -> list[float]:
            return [float(c[name]) for c in self.last_components]

        reward.__name__ = f"critic_{name}"
        return reward
