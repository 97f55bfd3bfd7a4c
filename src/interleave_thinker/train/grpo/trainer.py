"""GRPO on TRL's ``GRPOTrainer`` with our reward functions.

critic: the release's total reward (``critic_reward``) plus its components logged separately (as
zero-weight reward functions), the step-wise part's generator and judge calls batched and concurrent;
planner: ``planner_format_reward`` + ``planner_plan_reward`` + ``planner_score_reward`` (a row's external
``plan_score``). The reference model for the KL term is the
starting checkpoint, handled by TRL (``beta``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.backends.wrapping import close_backend
from interleave_thinker.core.build_progress import Phase, no_phase
from interleave_thinker.core.errors import ConfigError, RunFailedError
from interleave_thinker.train.common import (
    build_trl_config,
    finish_run,
    load_policy,
    resume_checkpoint,
    trl_trainer,
)
from interleave_thinker.train.grpo.config import GRPORunConfig, Role
from interleave_thinker.train.grpo.data import (
    critic_dataset,
    planner_dataset,
    planner_examples_from_files,
    synthetic_critic_examples,
)
from interleave_thinker.train.rewards import (
    PLANNER_REWARDS,
    CriticReward,
    StepwiseScorer,
    critic_accuracy_reward,
    critic_format_reward,
)

TRL_CHECKPOINTING_ALIAS = r"`is_gradient_checkpointing` is deprecated"
"""The start of the FutureWarning TRL's generation helpers cause (see :func:`run_grpo`)."""


@dataclass
class GRPOResult:
    output_dir: Path
    global_step: int
    final_model: Path
    """``output_dir`` itself, as in SFT and TRL's scripts (runs before this layout saved to ``output_dir/final``)."""
    log_history: list[dict[str, Any]]
    main_process: bool = True
    """False on the other ranks of a multi-process run (they print and write nothing)."""
    start_step: int = 0
    """The step this run started from (the checkpoint's with ``--resume``); earlier log entries are not this run's."""
    logging_steps: int = 0
    adapter: bool = False
    """True with ``finetune.method: lora``: ``output_dir`` holds the adapter, not full weights."""
    merged_dir: Path | None = None
    """The merged full model (``finetune.lora.merge``), else None."""


def _role(config: GRPORunConfig, role: Role | None) -> Role:
    chosen = role or config.role
    if chosen is None:
        raise ConfigError("Say which model to train: --role planner|critic (or role: in the config).")
    if config.role is not None and role is not None and config.role != role:
        raise ConfigError(
            f"--role {role} disagrees with role: {config.role} in the config; give the same role, or only one."
        )
    return chosen


def _load_policy(config: GRPORunConfig) -> tuple[Any, Any]:
    model, processor = load_policy(config.model, bf16=config.training.bf16)
    processor.tokenizer.padding_side = "left"
    return model, processor


def timed(name: str, fn: Callable[..., Sequence[float | None]]) -> Callable[..., Sequence[float | None]]:
    """A reward function that also logs its wall time per step (``reward_seconds/<name>``)."""

    def reward(prompts: Any, completions: list[Any], **columns: Any) -> Sequence[float | None]:
        start = time.perf_counter()
        values = fn(prompts, completions, **columns)
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric(f"reward_seconds/{name}", time.perf_counter() - start)
        return values

    reward.__name__ = name
    return reward


def reward_functions(
    config: GRPORunConfig, role: Role, *, generator: Any = None, judge_backend: Any = None
) -> tuple[list[Callable[..., Any]], list[float], list[Any]]:
    """(functions, weights, things to close) for the role; ``generator`` / ``judge_backend`` override the specs."""
    if role == "planner":
        planner = [timed(name, fn) for name, fn in PLANNER_REWARDS.items()]
        return planner, [1.0] * len(planner), []
    section = config.reward
    if not section.stepwise:
        weights = [section.format_weight, 1 - section.format_weight]
        return (
            [timed("critic_format", critic_format_reward), timed("critic_accuracy", critic_accuracy_reward)],
            weights,
            [],
        )
    from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend
    from interleave_thinker.train.rewards.cache import GenerationCache

    options = reward_backend_options(config)
    judge = section.judge_agent(
        judge_backend or load_vlm_backend(section.judge, options, role="judge"), config.prompts.store().load()
    )
    side = section.regenerate_size
    scorer = StepwiseScorer(
        generator or load_image_backend(section.generator, options),
        judge,
        deadline=section.deadline,
        size=None if side is None else (side, side),
        generator_concurrency=section.generator_concurrency,
        judge_concurrency=section.judge_concurrency,
        sample_concurrency=section.sample_concurrency,
        cache=GenerationCache(section.cache_dir),
    )
    total = CriticReward(scorer, section.weights())
    functions: list[Callable[..., Any]] = [timed("critic_reward", total)]
    functions += [total.component(name) for name in ("format", "accuracy", "semantic", "quality")]
    return functions, [1.0, 0.0, 0.0, 0.0, 0.0], [scorer]


def reward_backend_options(config: GRPORunConfig) -> Any:
    """The reward judge's and generator's placement and transport: ``reward.device``/``dtype``, ``remote``."""
    from interleave_thinker.backends.specs import BackendOptions

    return BackendOptions(device=config.reward.device, dtype=config.reward.dtype, remote=config.remote)


def train_dataset(config: GRPORunConfig, role: Role) -> Any:
    return _prompt_set(config, role, config.data.train, config.data.synthetic, held_out=False)


def eval_dataset(config: GRPORunConfig, role: Role) -> Any | None:
    """The held-out prompts scored every ``eval_steps`` (None when the config has none)."""
    if not config.data.eval and config.data.eval_synthetic is None:
        return None
    return _prompt_set(config, role, config.data.eval, config.data.eval_synthetic, held_out=True)


def _prompt_set(
    config: GRPORunConfig, role: Role, files: list[Path], synthetic: int | None, *, held_out: bool
) -> Any:
    """Prompts from files, or synthetic ones; held-out synthetic prompts use other subjects and another seed."""
    templates = config.prompts.store().load()
    seed = config.training.seed + (1 if held_out else 0)
    if role == "critic":
        if synthetic is not None:
            from interleave_thinker.train.data.trl_format import rl_dataset
            from interleave_thinker.train.grpo.data import HELD_OUT_SUBJECTS, SUBJECTS

            image_dir = config.output_dir / ("synthetic_eval_images" if held_out else "synthetic_images")
            subjects = HELD_OUT_SUBJECTS if held_out else SUBJECTS
            return rl_dataset(
                synthetic_critic_examples(
                    templates,
                    synthetic,
                    image_dir,
                    seed=seed,
                    subjects=subjects,
                    restate=config.data.synthetic_restate,
                )
            )
        return critic_dataset(
            files,
            config.data.image_dir,
            templates=templates if config.data.critic_prompt == "template" else None,
        )
    if synthetic is not None:
        import random

        from interleave_thinker.train.data.examples import PlannerRLExample
        from interleave_thinker.train.synthetic import synthetic_request

        rng = random.Random(seed)
        return planner_dataset(
            [PlannerRLExample(synthetic_request(rng).text) for _ in range(synthetic)], templates
        )
    return planner_dataset(planner_examples_from_files(files, config.data.image_dir, templates), templates)


def trl_config(config: GRPORunConfig, output_dir: Path, weights: list[float]) -> Any:
    from trl import GRPOConfig

    t = config.training
    args: dict[str, Any] = {
        "num_generations": t.num_generations,
        "temperature": t.temperature,
        "top_p": t.top_p,
        "beta": t.beta,
        "max_completion_length": t.max_completion_length,
        "max_grad_norm": t.max_grad_norm,
        "epsilon": t.epsilon,
        "epsilon_high": t.epsilon_high,
        "delta": t.delta,
        "use_vllm": t.use_vllm,
        "reward_weights": weights,
        "generation_batch_size": t.generation_batch_size or t.global_batch_size,
        "num_generations_eval": t.num_generations_eval,
        "per_device_eval_batch_size": t.per_device_eval_batch_size or t.per_device_train_batch_size,
        "remove_unused_columns": False,
    }
    if t.eval_steps is not None:
        args |= {"eval_strategy": "steps", "eval_steps": t.eval_steps}
    if t.use_vllm:
        args["vllm_mode"] = "server"
        if t.vllm_server_base_url:
            args["vllm_server_base_url"] = t.vllm_server_base_url
    built = build_trl_config(GRPOConfig, t, output_dir, args, config.trl)
    if t.global_batch_size is not None:
        built.gradient_accumulation_steps = accumulation_for(
            t.global_batch_size, t.per_device_train_batch_size, built.world_size
        )
    return built


def accumulation_for(global_batch: int, per_device: int, processes: int) -> int:
    """``training.global_batch_size`` as TRL counts it: passes per optimizer step on each process."""
    share = per_device * processes
    if global_batch % share:
        raise ConfigError(
            f"training.global_batch_size {global_batch} is not a multiple of per_device_train_batch_size x "
            f"processes ({per_device} x {processes} = {share}): change per_device_train_batch_size or the "
            "number of processes so that it divides."
        )
    return global_batch // share


def build_grpo_trainer(
    config: GRPORunConfig,
    role: Role | None = None,
    callbacks: Sequence[Any] = (),
    *,
    generator: Any = None,
    judge_backend: Any = None,
    phase: Phase = no_phase,
) -> tuple[Any, list[Any]]:
    """The configured ``GRPOTrainer`` and the reward resources to close after training."""
    chosen = _role(config, role)
    with phase("setting up the rewards"):
        functions, weights, closers = reward_functions(
            config, chosen, generator=generator, judge_backend=judge_backend
        )
    try:  # the reward's backends answer before TRL and the policy load: a dead judge stops in seconds
        callbacks = [*callbacks, *reward_guards(config, closers, phase)]
        with phase("importing TRL"):
            from trl import GRPOTrainer

            from interleave_thinker.train.grpo.advantages import with_advantage_settings
        with phase(f"loading model {config.model.name_or_path}"):
            model, processor = _load_policy(config)
    except BaseException:
        for closer in closers:
            closer.close()
        raise
    # The TRL config first: it sets up the distributed state, so the main process writes the synthetic
    # prompts' images before the other ranks read them. Reward backends are loaded on every rank (each
    # scores its own slice of the rollouts; served backends are shared through their URLs).
    args = trl_config(config, config.output_dir, weights)
    with args.main_process_first(desc="GRPO prompts"), phase("building the prompts"):
        train, evals = train_dataset(config, chosen), eval_dataset(config, chosen)
    t = config.training
    trainer_class = with_advantage_settings(GRPOTrainer, clip=t.advantage_clip, epsilon=t.advantage_epsilon)
    with phase(f"building the trainer ({len(train)} prompts)"):
        trainer = trl_trainer(
            trainer_class, config, (model, processor, args), (train, evals), callbacks, reward_funcs=functions
        )
    return trainer, closers


def reward_guards(config: GRPORunConfig, closers: list[Any], phase: Phase = no_phase) -> list[Any]:
    """With the step-wise reward: its preflight (``remote.preflight``), then the failure budget callback."""
    from interleave_thinker.train.rewards.critic import preflight_stepwise

    scorer = next((c for c in closers if isinstance(c, StepwiseScorer)), None)
    if scorer is None:
        return []
    if config.remote.preflight:
        try:
            with phase("preflight: the reward's served generator and judge"):
                preflight_stepwise(scorer)
        except BaseException:
            close_backend(scorer.judge.backend)  # the connections the stopped run opened
            close_backend(scorer.generator)
            raise
    from interleave_thinker.train.grpo.budget import FailureBudget

    return [FailureBudget(scorer, config.reward.max_failure_share, config.reward.failure_window)]


def run_grpo(
    config: GRPORunConfig,
    role: Role | None = None,
    *,
    resume: bool = False,
    phase: Phase = no_phase,
    callbacks: Sequence[Any] = (),
) -> GRPOResult:
    """Train; a run the failure budget stopped raises :class:`RunFailedError` (its checkpoint kept)."""
    trainer, closers = build_grpo_trainer(config, role, callbacks, phase=phase)
    from interleave_thinker.train.grpo.budget import FailureBudget  # after the preflight: it imports torch

    budget = next((c for c in trainer.callback_handler.callbacks if isinstance(c, FailureBudget)), None)
    checkpoint = resume_checkpoint(config.output_dir, resume)
    try:
        with warnings.catch_warnings():
            # TRL 1.16 reads transformers 5's deprecated `model.is_gradient_checkpointing` around every
            # generation, a FutureWarning printed once per call site (twice) that no argument of ours causes
            # or can avoid; only this one message is hidden, only while training.
            warnings.filterwarnings("ignore", message=TRL_CHECKPOINTING_ALIAS, category=FutureWarning)
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        for closer in closers:
            closer.close()
            if isinstance(closer, StepwiseScorer):  # loaded here from the config's specs: ours to close
                close_backend(closer.judge.backend)
                close_backend(closer.generator)
    if budget is not None and budget.stopped is not None:
        raise RunFailedError(budget.stopped)
    facts = finish_run(trainer, config, checkpoint)  # saved as SFT and TRL's own scripts save it
    return GRPOResult(
        config.output_dir,
        trainer.state.global_step,
        config.output_dir,
        list(trainer.state.log_history),
        **facts,
    )
