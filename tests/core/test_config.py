from __future__ import annotations

from pathlib import Path

import pytest

from interleave_thinker.backends.specs import parse_spec
from interleave_thinker.core.config import PipelineConfig, env_overrides
from interleave_thinker.core.errors import ConfigError
from tests.helpers.common import REPO


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
    with pytest.raises(ConfigError, match=r"planner spec .*: no backend kind"):
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
    with pytest.raises(ConfigError, match=r"Backend spec .no-kind-here.: no backend kind"):
        parse_spec("no-kind-here")
    with pytest.raises(ConfigError, match="known kinds: a, b"):
        parse_spec("c:x", {"a": 1, "b": 2})


def test_docs_table_is_the_settings_model() -> None:
    """docs/configuration.md lists every key once, with the field's description (the flags' help too)."""
    from interleave_thinker.core.config_keys import config_table, documented_keys

    text = (REPO / "docs" / "configuration.md").read_text()
    table = text.split("<!-- keys:start -->\n")[1].split("\n<!-- keys:end -->")[0]
    assert table == config_table()
    keys = [line.split("`")[1] for line in table.splitlines()[2:]]
    assert keys == documented_keys() and len(set(keys)) == len(keys)
    assert {"remote.backoff_max", "generation.height", "prompts.verify", "loop.seed_base"} <= set(keys)


def test_flag_help_is_the_field_description() -> None:
    import typing

    from interleave_thinker.cli.options import PIPELINE_FLAGS, SETTINGS_FLAGS
    from interleave_thinker.core.config_keys import field_help

    for name, (key, declaration) in {**SETTINGS_FLAGS, **PIPELINE_FLAGS}.items():
        if name == "config":
            continue
        option = typing.get_args(declaration)[1]
        assert option.help.startswith(field_help(key)), name


def test_prompt_settings_build_the_template_store(tmp_path: Path) -> None:
    from interleave_thinker.core.config import PromptOptions

    options = PromptOptions(
        folder=tmp_path / "t", cache_dir=tmp_path / "c", base_url="http://mirror.test/x/", verify=False
    )
    store = options.store()
    assert (store.folder, store.cache_dir, store.base_url) == (
        tmp_path / "t",
        tmp_path / "c",
        "http://mirror.test/x",
    )
    assert (store.verify, store.builtin_fallback) == (False, True)
    assert PromptOptions(download=False).store().download_allowed is False


def test_training_configs_load_with_overrides_and_name_the_file(tmp_path: Path) -> None:
    from interleave_thinker.train.grpo.config import GRPORunConfig

    path = tmp_path / "g.yaml"
    path.write_text(
        "output_dir: a\nmodel: {name_or_path: tiny}\ndata: {synthetic: 2}\n"
        "training: {per_device_train_batch_size: 2, num_generations: 2}\n"
        "reward: {device: cpu}\nremote: {timeout: 5}\nprompts: {download: false}\n"
    )
    config = GRPORunConfig.load(path, {"output_dir": "b", "role": None})
    assert (str(config.output_dir), config.role, config.reward.device) == ("b", None, "cpu")
    assert (config.remote.timeout, config.prompts.download) == (5, False)
    path.write_text(path.read_text() + "remote: {timout: 5}\n")
    with pytest.raises(ConfigError, match=r"Invalid GRPO config .*g.yaml: unknown key 'remote.timout'"):
        GRPORunConfig.load(path)


def test_the_opt_in_loop_flags_reach_the_settings_and_the_trace_record() -> None:
    """``--references``, ``--candidates``, ``--select-best``, ``--repair-budget`` set their loop keys; at
    their defaults the trace's record of the loop has none of them (the release's trace, byte for byte)."""
    from interleave_thinker.cli.options import SettingsFlags

    flags = {
        "preset": "tiny",
        "references": "anchor",
        "candidates": 3,
        "select_best": "critic",
        "repair_budget": 2,
    }
    loop = SettingsFlags(flags).resolve().loop
    assert (loop.references, loop.candidates, loop.select_best, loop.repair_budget) == (
        "anchor",
        3,
        "critic",
        2,
    )
    assert {"references", "candidates", "select_best", "repair_budget"} <= set(loop.trace_settings())
    default = SettingsFlags({"preset": "tiny"}).resolve().loop.trace_settings()
    assert not {"references", "candidates", "select_best", "repair_budget", "repair_reviewer"} & set(default)


@pytest.mark.parametrize(
    "command", [["run", "a cat"], ["batch", "--input", "in.jsonl", "--out", "o"], ["demo"]]
)
def test_select_best_judge_is_a_flag_and_the_refusal_names_it(command: list[str], tmp_path: Path) -> None:
    """``loop.select_best: judge`` can be set by flags alone: the refusal without a judge names
    ``--select-best-judge``, a flag the command has (``--judge`` is not one of run, batch and demo)."""
    import typer
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app
    from interleave_thinker.cli.options import SettingsFlags

    refused = CliRunner().invoke(app, [*command, "--preset", "tiny", "--select-best", "judge"])
    assert isinstance(refused.exception, ConfigError)  # the console's usage error: exit 2
    assert "--select-best-judge SPEC" in str(refused.exception)
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    cmd = group.get_command(ctx, command[0])  # type: ignore[attr-defined]
    names = {opt for param in cmd.params for opt in getattr(param, "opts", [])}
    assert "--select-best-judge" in names and "--judge" not in names
    flags = {"preset": "tiny", "select_best": "judge", "select_best_judge": "tiny:judge"}
    cfg = SettingsFlags(flags, pipeline=True).resolve()
    assert (cfg.loop.select_best, cfg.judge) == ("judge", "tiny:judge")
