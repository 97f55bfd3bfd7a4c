"""The configs that say "the release's settings" have them (issue 29, item 4).

Each such config lists the release's values in its header (``release: KEY = VALUE  (FILE:LINE)``);
the tests read those lines, check the loaded config holds each value, that docs/notes/release-settings.md's table
has a row for each setting with the same source line, and that the TRL arguments built from the
config give the release's geometry: 16 prompts x 8 rollouts per rollout batch, two optimizer steps of
8 prompts x 8 each, AdamW weight decay 1e-2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from interleave_thinker.core.errors import ConfigError
from interleave_thinker.train.grpo.advantages import clip_advantages, with_advantage_clip
from interleave_thinker.train.grpo.config import GRPORunConfig
from interleave_thinker.train.grpo.trainer import accumulation_for
from interleave_thinker.train.grpo.trainer import trl_config as grpo_trl_config
from interleave_thinker.train.sft.config import SFTRunConfig
from interleave_thinker.train.sft.trainer import trl_config as sft_trl_config
from tests.helpers.common import REPO

RELEASE_LINE = re.compile(r"^#\s+release: (?P<key>[\w.]+) = (?P<value>\S+)\s+\((?P<source>[^:)]+:\d+)")
CPU = ("training.bf16=false", "training.use_cpu=true", "training.report_to=none")
CONFIGS: dict[str, tuple[type[SFTRunConfig] | type[GRPORunConfig], dict[str, float]]] = {
    "sft_critic.yaml": (SFTRunConfig, {"training.num_train_epochs": 2.0, "training.weight_decay": 1e-6}),
    "sft_planner.yaml": (SFTRunConfig, {"training.num_train_epochs": 3.0, "training.weight_decay": 1e-6}),
    "grpo_critic.yaml": (
        GRPORunConfig,
        {
            "training.num_generations": 8,
            "training.generation_batch_size": 128,
            "training.global_batch_size": 64,
            "training.weight_decay": 1e-2,
            "training.beta": 0.0,
            "training.learning_rate": 2e-6,
        },
    ),
}


def release_lines(name: str) -> list[dict[str, str]]:
    lines = (REPO / "configs" / name).read_text(encoding="utf-8").splitlines()
    return [m.groupdict() for m in map(RELEASE_LINE.match, lines) if m]


def value_at(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part)
    return config


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_release_value_in_the_header_is_the_configs_value_and_in_the_docs(name: str) -> None:
    model, required = CONFIGS[name]
    config = model.load(REPO / "configs" / name)
    lines = release_lines(name)
    assert {line["key"] for line in lines} >= set(required)  # the header names every required setting
    table = (REPO / "docs" / "notes" / "release-settings.md").read_text(encoding="utf-8")
    for line in lines:
        written = yaml.safe_load(line["value"])
        assert (
            value_at(config, line["key"]) == pytest.approx(written)
            or value_at(config, line["key"]) == written
        )
        row = next((r for r in table.splitlines() if f"`{name}`" in r and f"`{line['key']}`" in r), None)
        assert row is not None, f"docs/notes/release-settings.md has no row for {name} {line['key']}"
        assert line["source"] in row, f"{name} {line['key']}: the docs row does not cite {line['source']}"
    for key, value in required.items():
        assert value_at(config, key) == pytest.approx(value)


@pytest.mark.parametrize(("name", "epochs"), [("sft_critic.yaml", 2.0), ("sft_planner.yaml", 3.0)])
def test_sft_configs_reach_trl_with_the_release_epochs_and_weight_decay(
    name: str, epochs: float, tmp_path: Path
) -> None:
    config = SFTRunConfig.load(REPO / "configs" / name, sets=CPU)
    args = sft_trl_config(config, tmp_path, vision=True)
    assert (args.num_train_epochs, args.weight_decay) == (epochs, 1e-6)
    assert (args.learning_rate, args.lr_scheduler_type.value, args.per_device_train_batch_size) == (
        2e-5,
        "cosine",
        2,
    )


def test_grpo_critic_config_reaches_trl_with_the_release_geometry(tmp_path: Path) -> None:
    config = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=CPU)
    args = grpo_trl_config(config, tmp_path, [1.0])
    processes = args.world_size
    assert processes == 1  # this test's process; on 8 the accumulation is 8 (below)
    update = args.per_device_train_batch_size * processes * args.gradient_accumulation_steps
    assert update == 64 and args.generation_batch_size == 128
    assert args.generation_batch_size // args.num_generations == 16  # prompts per rollout batch
    assert update // args.num_generations == 8  # prompts per optimizer step (EasyR1's global batch)
    assert args.steps_per_generation // args.gradient_accumulation_steps == 2  # updates per rollout batch
    assert (args.weight_decay, args.beta, args.lr_scheduler_type.value) == (1e-2, 0.0, "constant")
    assert (args.learning_rate, args.temperature, args.top_p, args.max_grad_norm) == (2e-6, 1.0, 1.0, 1.0)
    assert (args.epsilon, args.epsilon_high) == (0.2, 0.3)


def test_the_global_batch_is_split_over_the_processes() -> None:
    assert accumulation_for(64, 1, 8) == 8  # the release's node: 8 GPUs, one completion each per pass
    assert accumulation_for(64, 2, 4) == 8
    with pytest.raises(ConfigError, match=r"global_batch_size 64 is not a multiple of .* 6"):
        accumulation_for(64, 1, 6)


def test_a_global_batch_of_partial_groups_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="global_batch_size"):
        GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=["training.global_batch_size=60"])
    with pytest.raises(ConfigError, match="generation_batch_size"):
        GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=["training.generation_batch_size=96"])


class _Scored:
    """What TRL's scoring step returns, from a base trainer class (the clip wraps any such class)."""

    def __init__(self, advantages: list[float]) -> None:
        self.advantages = advantages
        self.model = torch.nn.Linear(1, 1)
        self._metrics: dict[str, dict[str, list[float]]] = {"train": {}, "eval": {}}

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        for mode in self._metrics.values():
            mode.setdefault("advantages/clipped_fraction", [])
        return {"advantages": torch.tensor(self.advantages), "prompt_ids": inputs}


def test_advantage_clip_clamps_what_the_loss_sees_and_logs_how_much() -> None:
    clipped_class = with_advantage_clip(_Scored, 5.0)
    trainer = clipped_class([7.5, -6.0, 1.0, -1.0])
    out = trainer._generate_and_score_completions("ids")
    assert out["advantages"].tolist() == [5.0, -5.0, 1.0, -1.0] and out["prompt_ids"] == "ids"
    assert trainer._metrics["train"]["advantages/clipped_fraction"] == [0.5]
    assert with_advantage_clip(_Scored, None) is _Scored  # off by default: TRL's class unchanged
    values, changed = clip_advantages(torch.tensor([0.5, -0.25]), 5.0)
    assert values.tolist() == [0.5, -0.25] and changed == 0.0


def test_the_clip_overrides_trls_scoring_step() -> None:
    from trl import GRPOTrainer

    clipped = with_advantage_clip(GRPOTrainer, 5.0)
    assert issubclass(clipped, GRPOTrainer)
    assert "_generate_and_score_completions" in vars(clipped)
    assert "_generate_and_score_completions" in vars(GRPOTrainer)  # the step TRL scores and normalises in


def test_accelerate_configs_named_by_the_configs_and_docs_exist() -> None:
    texts = [p.read_text(encoding="utf-8") for p in (REPO / "configs").glob("*.yaml")]
    texts += [p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md")]
    named = {m for text in texts for m in re.findall(r"configs/accelerate/[\w.-]+\.yaml", text)}
    assert "configs/accelerate/deepspeed_zero3.yaml" in named
    missing = sorted(n for n in named if not (REPO / n).is_file())
    assert missing == []


def test_the_critic_reward_mix_is_the_releases_and_stated_once() -> None:
    """overall = 0.5 * format + 0.5 * (0.2 * accuracy + 0.6 * semantic + 0.2 * quality): the defaults of
    ``reward.*_weight`` are the reward's own (``CriticRewardWeights``), so the two cannot drift apart."""
    from interleave_thinker.train.rewards import CriticRewardWeights

    config = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml")
    assert config.reward.weights() == CriticRewardWeights() == CriticRewardWeights(0.5, 0.2, 0.6, 0.2)
    assert config.reward.weights().overall(1.0, 1.0, 0.5, 0.0) == pytest.approx(0.5 + 0.5 * (0.2 + 0.3))
    changed = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=("reward.semantic_weight=0.7",))
    assert changed.reward.weights().semantic == 0.7


# --- GRPO and its reward as released (issue 40) ------------------------------------------------------

GRPO_MINIMAL = {
    "role": "critic",
    "output_dir": "out",
    "model": {"name_or_path": "tiny:critic"},
    "data": {"synthetic": 2},
}
RELEASE_ROWS = [
    # key, the release's effective value (the default now), the value that restores the earlier behaviour
    ("model.freeze_vision_tower", False, True),
    ("model.freeze_projector", False, True),
    ("training.epsilon_high", 0.3, None),
    ("training.delta", 3.0, None),
    ("training.advantage_epsilon", 1e-6, 1e-4),
    ("data.critic_prompt", "template", "problem"),
    ("reward.judge_text_first", True, False),
    ("reward.judge_decoding", "checkpoint", "greedy"),
    ("reward.judge_max_new_tokens", 4096, 1024),
    ("reward.judge_max_attempts", 5, 3),
    ("reward.regenerate_size", 1024, None),
]


@pytest.mark.parametrize(("key", "release", "before"), RELEASE_ROWS, ids=[r[0] for r in RELEASE_ROWS])
def test_grpo_defaults_are_the_releases_and_a_key_restores_the_earlier_behaviour(
    key: str, release: Any, before: Any, tmp_path: Path
) -> None:
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(GRPO_MINIMAL), encoding="utf-8")
    assert value_at(GRPORunConfig.load(path), key) == release
    assert value_at(GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml"), key) == release
    restored = GRPORunConfig.load(path, sets=[f"{key}={'null' if before is None else before}"])
    assert value_at(restored, key) == before
    table = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    rows = [row for row in table.splitlines() if row.startswith("|") and f"`{key}`" in row]
    assert rows and (".py:" in rows[0] or ".yaml:" in rows[0]), (
        f"docs/training.md has no release row for {key}"
    )


PIPELINE_ROWS = [
    # key, the release's effective value (the default now), the value that restores the earlier behaviour
    ("model.seed_device", "pipeline", "cpu"),  # item 4: a CUDA pipeline seeds a generator on its device
]


@pytest.mark.parametrize(("key", "release", "before"), PIPELINE_ROWS, ids=[r[0] for r in PIPELINE_ROWS])
def test_pipeline_defaults_are_the_releases_and_a_key_restores_the_earlier_behaviour(
    key: str, release: Any, before: Any
) -> None:
    from interleave_thinker.core.config import PipelineConfig

    section, leaf = key.split(".")
    assert value_at(PipelineConfig.resolve(preset="official"), key) == release
    restored = PipelineConfig.resolve(preset="official", overrides={section: {leaf: before}})
    assert value_at(restored, key) == before
    table = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    rows = [row for row in table.splitlines() if row.startswith("|") and f"`{key}`" in row]
    assert rows and ".py:" in rows[0], f"docs/training.md has no release row for {key}"


def test_grpo_clip_ratios_and_dual_clip_reach_trl(tmp_path: Path) -> None:
    config = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=CPU)
    args = grpo_trl_config(config, tmp_path, [1.0])
    assert (args.epsilon, args.epsilon_high, args.delta, args.loss_type) == (0.2, 0.3, 3.0, "dapo")
    off = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=(*CPU, "training.delta=null"))
    assert grpo_trl_config(off, tmp_path, [1.0]).delta is None


def test_trls_delta_gives_easyr1s_dual_clip_loss() -> None:
    """EasyR1's dual-clip: -A * ratio clipped to [1-0.2, 1+0.3] (the pessimistic one), and for A < 0 at most
    -A * 3; TRL's: the ratio clamped at delta before the same clipped minimum. Equal on a grid."""
    ratio = torch.tensor([0.1, 0.5, 0.8, 1.0, 1.2, 1.3, 2.0, 2.9, 3.0, 3.5, 10.0]).repeat_interleave(5)
    adv = torch.tensor([-2.47, -1.0, -0.1, 0.5, 2.0]).repeat(11)
    clipped = ratio.clamp(0.8, 1.3)
    easyr1 = torch.maximum(-adv * ratio, -adv * clipped)
    easyr1 = torch.where(adv < 0, torch.minimum(easyr1, -adv * 3.0), easyr1)
    capped = ratio.clamp(max=3.0)
    trl = -torch.minimum(capped * adv, clipped * adv)
    assert torch.allclose(easyr1, trl)
    assert not torch.allclose(easyr1, -torch.minimum(ratio * adv, clipped * adv))  # without delta it differs


def test_the_advantage_epsilon_gives_easyr1s_advantages_from_trls() -> None:
    from interleave_thinker.train.grpo.advantages import epsilon_factors

    rewards = torch.tensor(
        [0.5, 0.5, 0.5, 0.5, 0.1, 0.9, 0.3, 0.3, 0.50001, 0.5, 0.5, 0.5], dtype=torch.float64
    )
    groups = rewards.view(-1, 4)
    centred = (groups - groups.mean(dim=1, keepdim=True)).flatten()
    std = groups.std(dim=1).repeat_interleave(4)
    trl, easyr1 = centred / (std + 1e-4), centred / (std + 1e-6)
    rescaled = trl * epsilon_factors(trl, 4, 1e-6)
    assert torch.allclose(rescaled, easyr1, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(trl, easyr1, rtol=1e-3)  # the tiny-std group differs most


def test_the_critic_prompt_is_rebuilt_from_the_template_as_released() -> None:
    from interleave_thinker.core.prompt_store import TemplateStore
    from interleave_thinker.train.grpo.data import critic_dataset
    from tests.conftest import shared_path

    rows = shared_path("fixtures", "train-data", "critic_rl.jsonl")
    templates = TemplateStore(folder=shared_path("reference", "prompts"), download=False).load()
    first = json_line(rows)
    rebuilt, verbatim = critic_dataset([rows], None, templates=templates)[0], critic_dataset([rows], None)[0]
    parts = rebuilt["prompt"][0]["content"]
    assert [p["type"] for p in parts] == ["image", "image", "text"]
    expected = "\n" + templates.get("critic").strip()
    expected = expected.replace("{original_instruction}", first["origin_prompt"])
    previous = first.get("rewritten_prompt", first["previous_prompt"])  # the fixture names it previous_prompt
    assert parts[2]["text"] == expected.replace("{rewritten_prompt}", previous)
    assert rebuilt["images"] is not None and len(rebuilt["images"]) == 2
    assert verbatim["prompt"][0]["content"][2]["text"] == first["problem"].split("<image>")[-1]
    assert verbatim["prompt"][0]["content"][2]["text"] != parts[2]["text"]  # the row's own differs


def json_line(path: Path) -> dict[str, Any]:
    import json

    return dict(json.loads(path.read_text(encoding="utf-8").splitlines()[0]))


def test_lora_saves_a_trained_vision_tower_whole() -> None:
    from interleave_thinker.train.common import lora_config
    from interleave_thinker.train.grpo.config import GRPOModelSection
    from interleave_thinker.train.sft.config import FinetuneSection

    lora = FinetuneSection(method="lora")
    assert lora_config(lora, GRPOModelSection(name_or_path="x")).modules_to_save == ["visual"]
    frozen = GRPOModelSection(name_or_path="x", freeze_vision_tower=True, freeze_projector=True)
    assert lora_config(lora, frozen).modules_to_save is None


def test_grpo_trains_the_tower_and_bounds_its_images(tmp_path: Path) -> None:
    from interleave_thinker.train.common import load_policy

    path = tmp_path / "grpo.yaml"
    path.write_text(
        yaml.safe_dump(GRPO_MINIMAL | {"model": {"name_or_path": "tiny:critic", "image_max_pixels": 4096}})
    )
    config = GRPORunConfig.load(path)
    model, processor = load_policy(config.model, bf16=False)
    tower = [p.requires_grad for n, p in model.named_parameters() if "visual" in n]
    assert tower and all(tower)
    assert processor.image_processor.size["longest_edge"] == 4096


def test_the_planner_sees_many_images_unreduced_as_released() -> None:
    """Five or more images: the release writes max_pixels 384x384 into each part, which its transformers
    ignores; ours applies it only when ``agents.many_images_max_pixels`` asks."""
    from interleave_thinker.core.config import AgentOptions

    assert AgentOptions().many_images_max_pixels is None
    table = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    assert "`agents.many_images_max_pixels`" in table and "processing_utils.py:1633-1653" in table
