"""The typed GRPO configuration. Defaults follow the release's critic GRPO settings (EasyR1) where they
do not slow the tiny runs: 8 rollouts per prompt, temperature 1.0, top_p 1.0, lr 2e-6, responses up
to 4096 tokens, grad clip 1.0, bf16. The release's whole recipe (rollout and update geometry, weight
decay, constant schedule, no KL term) is ``configs/grpo_critic.yaml``; docs/notes/release-settings.md tabulates each
value with its line in the release.

What is trained and how follows the release's effective behaviour by default (docs/training.md, "GRPO as
released"): the vision tower and projector train (``freeze_vision_tower: false``), ``model.image_max_pixels``
bounds the images, EasyR1's clip ratios 0.2 / 0.3 with its dual-clip 3.0 (TRL's ``delta``), advantages
divided by the group's standard deviation + 1e-6, the critic's prompt rebuilt from the critic template.
Each has a key that restores the earlier behaviour.

``global_batch_size``, ``advantage_epsilon`` and ``advantage_clip`` are our extensions of TRL's options: an
update batch counted over all processes (EasyR1's unit), EasyR1's advantage epsilon and the FastVideo
branch's advantage clip."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from interleave_thinker.core.config import PromptOptions, RemoteOptions
from interleave_thinker.core.config_sections import count, unset
from interleave_thinker.train.overrides import load_run_config
from interleave_thinker.train.rewards.critic import CriticRewardWeights
from interleave_thinker.train.sft.config import FinetuneSection, ModelSection, OutputDir, _Section

if TYPE_CHECKING:
    from interleave_thinker.agents.judge import Judge
    from interleave_thinker.backends.protocols import VLMBackend
    from interleave_thinker.core.prompt_store import TemplateSet

RELEASE_ADVANTAGE_EPSILON = 1e-6
"""EasyR1's GRPO advantage: (reward - group mean) / (group Bessel std + 1e-6) (``core_algos.py:194-208``)."""
TRL_ADVANTAGE_EPSILON = 1e-4
"""What TRL 1.16's ``GRPOTrainer`` adds to the group's std (hard-coded)."""

RELEASE_MIX = CriticRewardWeights()
"""The ``reward.*_weight`` defaults: the release's mix, stated once, in the reward itself."""

Role = Literal["planner", "critic"]


class GRPOModelSection(ModelSection):
    """``model.*`` of GRPO: as SFT's, but the vision tower and projector train, as in the release's GRPO
    (``freeze_vision_tower: false``, ``interleave_thinker_config.yaml:47``: every parameter is trained)."""

    freeze_vision_tower: bool = Field(
        default=False,
        description="Keep the vision encoder's weights fixed (the release's GRPO trains it: false). Under "
        "LoRA a trained tower is saved whole beside the adapter (PEFT modules_to_save).",
    )
    freeze_projector: bool = Field(
        default=False,
        description="Keep the vision-to-text merger fixed (the release's GRPO trains it: false).",
    )


class GRPODataSection(_Section):
    train: list[Path] = Field(
        default_factory=list,
        description="critic: critic_rl.jsonl files; planner: planner_rl .jsonl or planner_sft .json/.jsonl files.",
    )
    image_dir: Path | None = unset("Base folder of relative image paths.")
    synthetic: int | None = count(None, "Generate this many synthetic prompts instead (tiny runs and tests).")
    synthetic_restate: bool = Field(
        default=False,
        description="Synthetic critic prompts also end with the instruction (easier for tiny models; needs a warm start).",
    )
    eval: list[Path] = Field(
        default_factory=list,
        description="Held-out prompt files (same formats as train), scored every eval_steps.",
    )
    eval_synthetic: int | None = count(
        None, "Generate this many held-out synthetic prompts (other subjects and images than the train set)."
    )
    critic_prompt: Literal["template", "problem"] = Field(
        default="template",
        description="template: rebuild each critic_rl row's prompt from the critic template with its "
        "origin_prompt and previous (rewritten) prompt, images [origin_image_path, edited_image_path], as the "
        "release's RL dataset does (it ignores problem/images); problem: the row's problem and images verbatim.",
    )


class RewardSection(_Section):
    generator: str = Field(
        default="tiny:generator", description="Image backend spec for step-wise regeneration."
    )
    judge: str = Field(default="tiny:judge", description="VLM backend spec of the judge.")
    device: str | None = unset(
        "Where the local judge and generator run: 'cpu', 'cuda', 'cuda:1' or 'auto' "
        "(the pipeline's model.device); default: cuda when present."
    )
    dtype: str = Field(default="auto", description="dtype of the local judge and generator (model.dtype).")
    deadline: float = Field(default=70.0, gt=0, description="Seconds per rollout before it scores 0.5/0.5.")
    regenerate_size: int | None = Field(
        default=1024,
        ge=16,
        description="Side of the square regeneration (the release: always 1024x1024); None: the 'before' image's size.",
    )
    judge_text_first: bool = Field(
        default=True,
        description="The judge's turn holds the text, then the images, as the release's reward sends it; "
        "false: images first (as the `judge` command and data build ask).",
    )
    judge_decoding: Literal["checkpoint", "greedy"] = Field(
        default="checkpoint",
        description="checkpoint: the judge's own decoding, no temperature sent (the release's reward); "
        "greedy: temperature 0 on the first call.",
    )
    # the critic's total reward: format * F + (1 - format) * (accuracy * A + semantic * SC + quality * PQ)
    format_weight: float = Field(
        default=RELEASE_MIX.format,
        ge=0,
        le=1,
        description="Share of the total for the reply's format; the rest is the weighted sum of the three below.",
    )
    accuracy_weight: float = Field(
        default=RELEASE_MIX.accuracy, ge=0, description="Weight of the verdict's accuracy."
    )
    semantic_weight: float = Field(
        default=RELEASE_MIX.semantic, ge=0, description="Weight of the judge's semantic consistency (SC)."
    )
    quality_weight: float = Field(
        default=RELEASE_MIX.quality, ge=0, description="Weight of the judge's perceptual quality (PQ)."
    )
    stepwise: bool = Field(
        default=True, description="False: format + accuracy only (no generator or judge calls)."
    )
    generator_concurrency: int = count(4)
    judge_concurrency: int = count(8)
    sample_concurrency: int | None = count(
        None, "Rollouts scored at once (default: the whole batch); 1 = sequential."
    )
    judge_max_new_tokens: int = count(
        4096,
        "Bound of each judge reply (the release's reward: max_output_tokens 4096; at 1024 a thinking "
        "judge such as gemini-2.5-pro often returns no text).",
    )
    judge_max_attempts: int = count(
        5, "Judge calls per judgement while replies do not parse (the release's scorer default: 5)."
    )
    cache_dir: Path | None = unset("Keep regenerated images across steps and runs.")
    max_failure_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Largest share of judged step-wise samples (skipped ones not counted) whose judge or "
        "generator failed (each scored 0.5, as released) over the last failure_window logging steps; past "
        "it training stops with a checkpoint, to continue with --resume after the fix. 1 never stops.",
    )
    failure_window: int = count(5, "Logging steps over which max_failure_share is measured.")

    def judge_agent(self, backend: VLMBackend, templates: TemplateSet) -> Judge:
        """The step-wise reward's judge on ``backend``: the one request builder of ``train grpo`` and the
        ``reward`` command (text first, ``judge_max_new_tokens``, no temperature, ``judge_max_attempts``
        as released with the defaults)."""
        from interleave_thinker.agents.judge import Judge
        from interleave_thinker.agents.retry import RetryPolicy

        judge = Judge(
            backend,
            templates,
            max_new_tokens=self.judge_max_new_tokens,
            retry=RetryPolicy(
                max_attempts=self.judge_max_attempts,
                temperature=None if self.judge_decoding == "checkpoint" else 0.0,
            ),
        )
        judge.text_first = self.judge_text_first
        return judge

    def weights(self) -> CriticRewardWeights:
        """The critic reward's mix from the ``*_weight`` keys."""
        return CriticRewardWeights(
            self.format_weight, self.accuracy_weight, self.semantic_weight, self.quality_weight
        )


class GRPOTrainingSection(_Section):
    learning_rate: float = Field(default=2e-6, gt=0)
    num_generations: int = Field(default=8, ge=2, description="Rollouts per prompt (the group).")
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    beta: float = Field(default=0.01, ge=0, description="KL coefficient against the frozen starting model.")
    max_completion_length: int = count(4096)
    per_device_train_batch_size: int = count(8, "Completions per device per step.")
    gradient_accumulation_steps: int = count(
        1, "Forward/backward passes per optimizer step (overridden by global_batch_size)."
    )
    global_batch_size: int | None = count(
        None,
        "Completions per optimizer step over all processes; sets gradient_accumulation_steps to "
        "global_batch_size / (per_device_train_batch_size x processes), so the update batch does not depend on "
        "the number of GPUs (EasyR1's global batch; TRL counts it per device). None: keep gradient_accumulation_steps.",
    )
    generation_batch_size: int | None = count(
        None,
        "Completions rolled out at once over all processes (TRL's option); a multiple of the "
        "update batch gives several optimizer steps per rollout batch. None: one optimizer step's worth.",
    )
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay (TRL's default 0).")
    lr_scheduler_type: str = Field(
        default="linear", description="Learning-rate schedule (any transformers name; EasyR1's is constant)."
    )
    advantage_clip: float | None = unset(
        "Clip every advantage to [-c, c] after the group normalisation. None: no clip. A group of n "
        "rollouts normalised by its std never exceeds (n-1)/sqrt(n) (2.47 for 8), so the FastVideo branch's 5 "
        "never binds there; it binds only for larger groups or with advantage_epsilon near a tiny std.",
        gt=0,
    )
    advantage_epsilon: float = Field(
        default=RELEASE_ADVANTAGE_EPSILON,
        gt=0,
        description="Added to the group's std before dividing (EasyR1: 1e-6; TRL hard-codes 1e-4, the value "
        "that restores TRL's own advantages).",
    )
    epsilon: float = Field(default=0.2, gt=0, description="Lower clip ratio (EasyR1's clip_ratio_low 0.2).")
    epsilon_high: float | None = Field(
        default=0.3, gt=0, description="Upper clip ratio (EasyR1's clip_ratio_high 0.3); None: = epsilon."
    )
    delta: float | None = Field(
        default=3.0,
        gt=1,
        description="Dual-clip bound on the ratio (EasyR1's clip_ratio_dual 3.0, expressed by TRL's delta: the "
        "loss of a negative advantage stops growing at ratio delta). None: no dual clip (TRL's default).",
    )
    max_steps: int = Field(default=-1)
    num_train_epochs: float = Field(default=1.0, gt=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    bf16: bool = Field(default=True)
    gradient_checkpointing: bool = Field(default=False)
    save_steps: int = count(50)
    eval_steps: int | None = count(
        None, "Score the eval prompts every N steps (needs data.eval or data.eval_synthetic)."
    )
    num_generations_eval: int | None = count(None, "Rollouts per eval prompt (default: num_generations).")
    per_device_eval_batch_size: int | None = count(
        None, "Completions per device per eval batch (default: the train batch size)."
    )
    logging_steps: int = count(1)
    seed: int = Field(default=42)
    report_to: list[str] | Literal["auto", "none"] = Field(default="auto")
    use_cpu: bool = Field(default=False)
    use_vllm: bool = Field(
        default=False, description="Roll out on a `trl vllm-serve` server (see docs/training.md)."
    )
    vllm_server_base_url: str | None = Field(default=None)
    replica_check_steps: int | None = count(
        None,
        "Under several data-parallel processes, check every N steps that all ranks hold the same weights.",
    )


class GRPORunConfig(_Section):
    role: Role | None = None
    output_dir: OutputDir = Field(description="Checkpoints, logs and the final model.")
    model: GRPOModelSection
    data: GRPODataSection = Field(default_factory=GRPODataSection)
    reward: RewardSection = Field(default_factory=RewardSection)
    finetune: FinetuneSection = Field(default_factory=FinetuneSection)
    training: GRPOTrainingSection = Field(default_factory=GRPOTrainingSection)
    prompts: PromptOptions = Field(
        default_factory=PromptOptions, description="Templates of the judge and the prompts (as in run)."
    )
    remote: RemoteOptions = Field(
        default_factory=RemoteOptions, description="Transport of served reward backends (as in run)."
    )
    trl: dict[str, Any] = Field(
        default_factory=dict, description="Extra trl.GRPOConfig fields (names are checked)."
    )

    @model_validator(mode="after")
    def _check(self) -> GRPORunConfig:
        if not self.data.train and self.data.synthetic is None:
            raise ValueError("data: give train files or a synthetic count")
        if self.data.eval and self.data.eval_synthetic is not None:
            raise ValueError("data: give eval files or an eval_synthetic count, not both")
        has_eval = bool(self.data.eval) or self.data.eval_synthetic is not None
        if self.training.eval_steps is not None and not has_eval:
            raise ValueError(
                "training.eval_steps needs held-out prompts: set data.eval or data.eval_synthetic"
            )
        t = self.training
        if t.global_batch_size is not None and t.global_batch_size % t.num_generations:
            raise ValueError(
                f"training.global_batch_size ({t.global_batch_size}) must be a multiple of num_generations "
                f"({t.num_generations}): an update holds whole groups"
            )
        if t.generation_batch_size is not None:
            update = t.global_batch_size or t.per_device_train_batch_size * t.gradient_accumulation_steps
            if t.generation_batch_size % update:
                raise ValueError(
                    f"training.generation_batch_size ({t.generation_batch_size}) must be a multiple of the "
                    f"update batch ({update}): every rollout batch is used by whole optimizer steps"
                )
        total = self.training.per_device_train_batch_size * self.training.gradient_accumulation_steps
        if t.global_batch_size is None and total % self.training.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x gradient_accumulation_steps ({total}) must be a multiple of "
                f"num_generations ({self.training.num_generations})"
            )
        eval_batch = self.training.per_device_eval_batch_size or self.training.per_device_train_batch_size
        eval_group = self.training.num_generations_eval or self.training.num_generations
        if has_eval and eval_batch % eval_group:
            raise ValueError(
                f"per_device_eval_batch_size ({eval_batch}) must be a multiple of num_generations_eval ({eval_group})"
            )
        return self

    @classmethod
    def load(
        cls, path: Path, overrides: dict[str, Any] | None = None, sets: Sequence[str] = ()
    ) -> GRPORunConfig:
        """Read YAML with top-level ``overrides`` and ``--set KEY=VALUE`` changes, validated once."""
        return load_run_config(cls, path, "GRPO config", overrides=overrides, sets=sets)
