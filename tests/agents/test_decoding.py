"""Decoding as released (issue 29): a local call decodes with the checkpoint's own generation_config.json
by default, every planner and critic call carries a seed derived from the run's seed, recorded in the
trace, and a sampled run is reproduced by its seed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker import Pipeline
from interleave_thinker.agents.planner import Planner, format_plan
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.agents.seeds import Turn, call_seed
from interleave_thinker.backends.vlm.gemini_backend import GeminiVLMBackend
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.types import Plan, Trace
from interleave_thinker.testing.doubles.openai_chat import ScriptedServer, ok
from interleave_thinker.testing.scripted import ScriptedVLMBackend
from interleave_thinker.tiny.kind import tiny_vlm_folder

SAMPLING = {"do_sample": True, "temperature": 2.5, "top_k": 40, "top_p": 0.95}
"""A sampling config unlike transformers' defaults (1.0, 50, 1.0), so only the checkpoint can set it; hot,
so two seeds part early."""

USER = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
PLAN = Plan.model_validate(
    {
        "steps": [
            {
                "step_number": 1,
                "step_name": "s",
                "instruction": "a cat",
                "prompt": "a cat",
                "auxiliary_text": None,
            }
        ]
    }
)


class FakeGemini:
    """Shaped like ``google.genai.Client``: ``client.models.generate_content(model=, contents=, config=)``."""

    def __init__(self) -> None:
        self.models = self
        self.configs: list[dict[str, Any]] = []

    def generate_content(self, *, model: str, contents: list[Any], config: dict[str, Any]) -> Any:
        self.configs.append(config)
        return type("Response", (), {"text": "fine", "candidates": None, "prompt_feedback": None})()


@pytest.fixture(scope="module")
def sampling_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny format-trained planner, copied, with a generation config that samples."""
    folder = tmp_path_factory.mktemp("sampling") / "planner"
    shutil.copytree(tiny_vlm_folder("planner-sft"), folder)
    config_file = folder / "generation_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config_file.write_text(json.dumps({**config, **SAMPLING}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def runs(sampling_checkpoint: Path) -> dict[str, Any]:
    """Three runs (seeds 5, 5, 6) with the default settings (the 'official' preset's, no agents.decoding)
    over the sampling checkpoint as planner and critic, the tiny generator at a small size; and what
    ``generate`` decoded every call with: the checkpoint's config merged with the call's keywords."""
    config = PipelineConfig.resolve(
        overrides={
            "planner": f"transformers:{sampling_checkpoint}",
            "critic": f"transformers:{sampling_checkpoint}",
            "generator": "tiny:generator",
            "model": {"device": "cpu"},
            "agents": {"max_new_tokens": 8, "max_parse_attempts": 2},
            "loop": {"planner_fallback": "single-step", "max_attempts": 2},
            "generation": {"width": 32, "height": 32, "steps": 1},
        },
        environ={},
    )
    assert config.agents.decoding == "checkpoint"
    pipe = Pipeline.from_config(config)
    model = pipe.planner_backend.model  # type: ignore[attr-defined]
    prepare = model._prepare_generation_config
    effective: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = prepare(*args, **kwargs)
        effective.append(result[0])
        return result

    model._prepare_generation_config = spy
    try:
        traces = [pipe("a red cube", seed=seed).trace for seed in (5, 5, 6)]
    finally:
        del model._prepare_generation_config
    return {"traces": traces, "effective": effective}


def replies(trace: Trace) -> list[str]:
    return trace.planner.raw_replies + [r for s in trace.steps for a in s.attempts for r in a.critic_raw]


@pytest.mark.slow
def test_local_calls_decode_with_the_checkpoints_generation_config(
    runs: dict[str, Any], sampling_checkpoint: Path
) -> None:
    written = json.loads((sampling_checkpoint / "generation_config.json").read_text(encoding="utf-8"))
    del written["transformers_version"]
    assert written.keys() >= SAMPLING.keys()
    calls = sum(len(replies(trace)) for trace in runs["traces"])
    assert len(runs["effective"]) == calls >= 6
    for config in runs["effective"]:
        assert {key: getattr(config, key) for key in written} == written  # every value the file sets
        assert config.max_new_tokens == 8  # and only agents.max_new_tokens on top, as released


@pytest.mark.slow
def test_the_trace_records_each_calls_seed(runs: dict[str, Any]) -> None:
    trace = runs["traces"][0]
    planner_calls = len(trace.planner.raw_replies)
    assert trace.planner.seeds == [call_seed(5, "planner", 0, 0, k) for k in range(planner_calls)]
    reviewed = [a for s in trace.steps for a in s.attempts if a.critic_called]
    assert reviewed  # of two attempts, the first is reviewed
    for attempt in reviewed:
        expected = [
            call_seed(5, "critic", attempt.step_number, attempt.attempt, k)
            for k in range(len(attempt.critic_raw))
        ]
        assert attempt.critic_seeds == expected and expected
    written = Trace.model_validate_json(trace.model_dump_json())
    assert written.planner.seeds == trace.planner.seeds
    assert [a.critic_seeds for s in written.steps for a in s.attempts] == [
        a.critic_seeds for s in trace.steps for a in s.attempts
    ]


@pytest.mark.slow
def test_the_same_seed_gives_the_same_replies_and_another_seed_others(runs: dict[str, Any]) -> None:
    first, again, other = runs["traces"]
    assert replies(first) == replies(again) and replies(first)
    assert replies(first) != replies(other)
    assert first.planner.seeds == again.planner.seeds != other.planner.seeds


def test_greedy_decoding_is_the_old_first_call_greedy_retries_sampled() -> None:
    assert [RetryPolicy(3, None, 0.7).temperature_for(a) for a in range(3)] == [None, None, None]
    assert [RetryPolicy(3, 0.0, 0.7).temperature_for(a) for a in range(3)] == [0.0, 0.7, 0.7]
    tiny = PipelineConfig.resolve(preset="tiny", environ={})
    assert tiny.agents.decoding == "greedy"
    assert PipelineConfig.resolve(preset="official", environ={}).agents.decoding == "checkpoint"
    with pytest.raises(ConfigError, match=r"agents.temperature was replaced by agents.decoding"):
        PipelineConfig.resolve(preset="tiny", overrides={"agents": {"temperature": 0.0}}, environ={})


def test_served_backends_send_no_sampling_fields_by_default() -> None:
    """The release has no served path for its agents, so 'checkpoint' leaves decoding to the server."""
    with ScriptedServer(lambda i, call: ok("fine")) as server:
        backend = OpenAIVLMBackend(server.url, "planner")
        try:
            backend.chat(USER, max_new_tokens=9, temperature=None, seed=11)
            backend.chat(USER, max_new_tokens=9, temperature=0.0, seed=11)
        finally:
            backend.close()
    checkpoint, greedy = (call.body for call in server.calls)
    assert checkpoint == {"model": "planner", "messages": USER, "max_tokens": 9}
    assert greedy == {**checkpoint, "temperature": 0.0}
    client = FakeGemini()
    gemini = GeminiVLMBackend("gemini-2.5-pro", client=client)
    gemini.chat(USER, max_new_tokens=9, temperature=None, seed=11)
    assert client.models.configs[-1] == {"max_output_tokens": 9, "http_options": {"timeout": 300000}}


def test_agents_ask_with_the_models_own_decoding_and_seed_every_call() -> None:
    """The default settings ask every call, retries included, with temperature None and its own seed; a
    backend written before seeds (no ``seed`` parameter) still works, unseeded."""
    scripted = ScriptedVLMBackend(["no plan", "still none", format_plan(PLAN)])
    planner = Planner(scripted, builtin_templates(), retry=RetryPolicy(3, None))
    record = planner.plan("a cat", [], Turn(7))
    assert record.plan == PLAN and scripted.temperatures == [None, None, None]
    assert scripted.seeds == record.seeds == [call_seed(7, "planner", 0, 0, k) for k in range(3)]
    assert len(set(record.seeds)) == 3

    class Unseeded:
        name = "old"

        def chat(self, messages: list[Any], *, max_new_tokens: int = 4096, temperature: float = 0.0) -> str:
            return format_plan(PLAN)

    old = Planner(Unseeded(), builtin_templates(), retry=RetryPolicy(3, None))  # type: ignore[arg-type]
    assert old.plan("a cat", [], Turn(7)).plan == PLAN
