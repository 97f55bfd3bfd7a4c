"""Where a local generator seeds its ``torch.Generator`` (issue 40, item 4).

Every release generator seeds a CUDA generator (``UEval/ueval_klein.py:208, 219``; ``klein_api.py:137``),
so on a GPU the release's seed only gives the release's images from a generator on that device:
``model.seed_device: pipeline`` (the default) does that on CUDA and seeds on the CPU elsewhere, ``cpu``
keeps the CPU everywhere. The trace records where (``settings.generator_seed_device``). On this CPU-only
machine the CUDA side is checked as the rule; the CPU side draws noise.
"""

from __future__ import annotations

import pytest

from interleave_thinker import PipelineConfig
from interleave_thinker.backends.image.diffusers_backend import seeded_generator, seeded_on
from interleave_thinker.backends.specs import BackendOptions
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.testing.scripted import ScriptedImageBackend
from tests.helpers.pipelines import scripted_pipeline

PLAN = (
    "<think>one</think><answer>{'execution_plan': [{'step_number': 1, 'step_name': 's', "
    "'instruction': 'a cat', 'prompt': 'a cat', 'auxiliary_text': None}]}</answer>"
)


@pytest.mark.parametrize(
    ("device", "setting", "seeded"),
    [
        ("cuda", "pipeline", "cuda"),  # the release's way: the pipeline's CUDA device
        ("cuda:1", "pipeline", "cuda:1"),
        ("cuda:1", "cpu", "cpu"),  # the earlier behaviour, kept as a setting
        ("cpu", "pipeline", "cpu"),
        ("mps", "pipeline", "cpu"),  # the release seeds on CUDA only
    ],
)
def test_the_generator_seeds_on_the_pipelines_cuda_device_unless_told_cpu(
    device: str, setting: str, seeded: str
) -> None:
    assert seeded_on(device, setting) == seeded


def test_the_setting_reaches_the_backend_options_and_a_wrong_one_is_refused() -> None:
    default = PipelineConfig.resolve(preset="tiny")
    assert BackendOptions.from_config(default).seed_device == "pipeline"
    chosen = PipelineConfig.resolve(preset="tiny", overrides={"model": {"seed_device": "cpu"}})
    assert BackendOptions.from_config(chosen).seed_device == "cpu"
    with pytest.raises(ConfigError, match=r"model.seed_device 'gpu'"):
        seeded_on("cuda", "gpu")
    with pytest.raises(ConfigError, match="seed_device"):
        PipelineConfig.resolve(preset="tiny", overrides={"model": {"seed_device": "gpu"}})


class CudaSeededGenerator(ScriptedImageBackend):
    generator_device = "cuda:0"  # as a diffusers backend on a GPU declares it


@pytest.mark.parametrize(
    ("generator", "recorded"), [(CudaSeededGenerator(), "cuda:0"), (ScriptedImageBackend(), None)]
)
def test_the_trace_records_where_the_generator_seeds(
    generator: ScriptedImageBackend, recorded: str | None
) -> None:
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:p",
            "critic": "scripted:c",
            "generator": "scripted:g",
            "loop": {"max_attempts": 1},
        }
    )
    pipe = scripted_pipeline(config, PLAN, "unused", generator)
    settings = pipe("a cat").trace.settings
    assert settings.get("generator_seed_device") == recorded  # absent for a generator that does not say


def test_on_cpu_the_same_seed_gives_the_same_bits() -> None:
    """The generator each generation draws its noise from (``DiffusersImageBackend._call_kwargs``)."""
    import torch

    first, again, other = (seeded_generator(seed, seeded_on("cpu", "pipeline")) for seed in (7, 7, 8))
    assert (first.device.type, first.initial_seed()) == ("cpu", 7)
    noise = [torch.randn(64, generator=g) for g in (first, again, other)]
    assert torch.equal(noise[0], noise[1]) and not torch.equal(noise[0], noise[2])
