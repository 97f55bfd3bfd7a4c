from __future__ import annotations

from pathlib import Path

import pytest

from interleave_thinker.backends.specs import parse_spec
from interleave_thinker.core.config import PipelineConfig, env_overrides
from interleave_thinker.core.errors import ConfigError


def test_presets() -> None:
    official = PipelineConfig.resolve(environ={})
    assert official.preset == "official"
    assert official.planner == "transformers:InterleaveThinker/InterleaveThinker-Planner-8B"
    assert official.critic == "transformers:InterleaveThinker/InterleaveThinker-Critic-8B"
    assert official.generator == "diffusers:black-forest-labs/FLUX.2-klein-9B"
    assert (official.generation.steps, official.generation.guidance) == (4, 1.0)
    assert official.loop.max_attempts == 3 and not official.loop.critic_on_last_attempt
    sft = PipelineConfig.resolve(preset="official-sft-critic", environ={})
    assert sft.critic == "transformers:InterleaveThinker/Critic-SFT-8B" and sft.planner == official.planner
    tiny = PipelineConfig.resolve(preset="tiny", environ={})
    assert (
        tiny.planner == "tiny:planner-sft"
        and tiny.critic == "tiny:critic-sft"
        and tiny.loop.planner_fallback == "single-step"
    )


def test_file_env_and_flags_override_in_order(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("preset: tiny\nloop:\n  max_attempts: 5\n  seed_base: 3\ngeneration:\n  width: 128\n")
    env = {
        "INTERLEAVE_THINKER_LOOP__MAX_ATTEMPTS": "6",
        "INTERLEAVE_THINKER_PROMPTS": "/x",
        "INTERLEAVE_THINKER_GENERATOR": "diffusers:a/b",
    }
    cfg = PipelineConfig.resolve(config_file=config, environ=env, overrides={"loop": {"seed_base": 9}})
    assert cfg.loop.max_attempts == 6 and cfg.loop.seed_base == 9
    assert cfg.generation.width == 128 and cfg.generation.height == 64
    assert cfg.generator == "diffusers:a/b" and cfg.planner == "tiny:planner-sft"


def test_env_overrides_ignore_unrelated_variables() -> None:
    assert env_overrides({"INTERLEAVE_THINKER_HOME": "/h", "INTERLEAVE_THINKER_OFFLINE": "1"}) == {}
    assert env_overrides({"INTERLEAVE_THINKER_AGENTS__TEMPERATURE": "0.5"}) == {
        "agents": {"temperature": 0.5}
    }


def test_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'generation.widht'"):
        PipelineConfig.resolve(preset="tiny", overrides={"generation": {"widht": 3}}, environ={})
    with pytest.raises(ConfigError, match=r"'loop.max_attempts'"):
        PipelineConfig.resolve(preset="tiny", overrides={"loop": {"max_attempts": 0}}, environ={})
    with pytest.raises(ConfigError, match="has no backend kind"):
        PipelineConfig.resolve(preset="tiny", overrides={"planner": "Qwen/Qwen3-VL-8B-Instruct"}, environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"bad.yaml must hold a mapping"):
        PipelineConfig.resolve(config_file=bad, environ={})
    with pytest.raises(ConfigError, match="Cannot read config file"):
        PipelineConfig.resolve(config_file=tmp_path / "missing.yaml", environ={})


def test_parse_spec() -> None:
    spec = parse_spec("http:http://127.0.0.1:8011")
    assert (spec.kind, spec.target) == ("http", "http://127.0.0.1:8011")
    with pytest.raises(ConfigError, match="no kind"):
        parse_spec("no-kind-here")
    with pytest.raises(ConfigError, match="known kinds: a, b"):
        parse_spec("c:x", {"a": 1, "b": 2})
