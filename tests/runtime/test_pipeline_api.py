"""The Python API as a diffusers user reaches for it: per-call settings, PIL inputs, from_preset(device=),
and a trace that names the backends that really ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Unpack

import pytest
from PIL import Image

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.backends import specs
from interleave_thinker.backends.protocols import (
    ChatOptions,
    ImageBatchMixin,
    ImageRequest,
    Message,
    VLMBackend,
    VLMBatchMixin,
)
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.types import Plan, PlanStep
from interleave_thinker.runtime.call_overrides import ALIASES, CALL_KEYS, CallOverrides, preset_config
from interleave_thinker.runtime.used_backends import backend_description
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.replies import verdict

ONE_STEP = format_plan(
    Plan(steps=[PlanStep(step_number=1, step_name="S1", instruction="Draw.", prompt="a cat")], reasoning="r")
)
CONTINUE = format_plan(
    Plan(
        steps=[PlanStep(step_number=1, step_name="S1", instruction="Next.", prompt="the cat, later")],
        reasoning="r",
    )
)


def config(**loop: Any) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": loop,
            "generation": {"width": 40, "height": 24, "steps": 2},
        }
    )


def pipeline(plan: str = ONE_STEP, critic: str = verdict(True), **loop: Any) -> Pipeline:
    """Planner and critic answer the same reply every time; the generator records every ImageRequest."""
    return Pipeline(
        planner=ScriptedVLMBackend([plan], name="my-planner", repeat_last=True),
        critic=ScriptedVLMBackend([critic], name="my-critic", repeat_last=True),
        generator=ScriptedImageBackend(name="my-generator"),
        config=config(**loop),
        templates=builtin_templates(),
    )


def requests(pipe: Pipeline) -> list[ImageRequest]:
    generator = pipe.generator
    assert isinstance(generator, ScriptedImageBackend)
    return generator.calls


def test_a_per_call_seed_changes_that_call_only(tmp_path: Path) -> None:
    pipe = pipeline(critic=verdict(False, "a cat, sharper"), max_attempts=2)
    result = pipe("Draw a cat", seed=7, out_dir=tmp_path / "seeded")
    assert [r.seed for r in requests(pipe)] == [107, 108]
    assert [a.seed for a in result.trace.steps[0].attempts] == [107, 108]
    settings = json.loads((tmp_path / "seeded" / "trace.json").read_text())["settings"]
    assert settings["loop"]["seed_base"] == 7 and settings["call_overrides"] == {"seed": 7}
    again = pipe("Draw a cat")
    assert [r.seed for r in requests(pipe)[2:]] == [100, 101]  # the next call is back on the config
    assert pipe.config.loop.seed_base == 0 and "call_overrides" not in again.trace.settings


def test_steps_size_and_guidance_reach_the_image_request() -> None:
    pipe = pipeline()
    result = pipe("Draw a cat", steps=9, width=48, height=32, guidance=3.5)
    (request,) = requests(pipe)
    assert (request.steps, request.width, request.height, request.guidance) == (9, 48, 32, 3.5)
    assert result.steps[0].image is not None and result.steps[0].image.size == (48, 32)
    generation = result.trace.settings["generation"]
    assert generation == {"width": 48, "height": 32, "steps": 9, "guidance": 3.5}
    pipe("Draw a cat")
    assert requests(pipe)[1].settings == (40, 24, 2, None)


def test_diffusers_names_reach_the_image_request(tmp_path: Path) -> None:
    pipe = pipeline()
    result = pipe("Draw a cat", num_inference_steps=9, guidance_scale=3.5, out_dir=tmp_path / "named")
    (request,) = requests(pipe)
    assert (request.steps, request.guidance) == (9, 3.5)
    assert result.trace.settings["generation"] == {"width": 40, "height": 24, "steps": 9, "guidance": 3.5}
    settings = json.loads((tmp_path / "named" / "trace.json").read_text())["settings"]
    assert settings["call_overrides"] == {"num_inference_steps": 9, "guidance_scale": 3.5}


def test_the_short_names_are_aliases_recorded_under_the_diffusers_names() -> None:
    pipe = pipeline()
    result = pipe("Draw a cat", steps=5, guidance=2.0)
    (request,) = requests(pipe)
    assert (request.steps, request.guidance) == (5, 2.0)
    assert result.trace.settings["call_overrides"] == {"num_inference_steps": 5, "guidance_scale": 2.0}


def test_image_takes_one_image_or_a_list(tmp_path: Path) -> None:
    pipe = pipeline(plan=CONTINUE)
    frame = Image.new("RGB", (32, 32), (20, 120, 30))
    one = pipe("<image> What happens next?", image=frame)
    frame.save(tmp_path / "second.png")
    two = pipe("<image> then <image>: next?", image=[frame.copy(), tmp_path / "second.png"])
    assert one.trace.request.images[0].startswith("<PIL.Image 1: 32x32, sha256 ")
    assert two.trace.request.images == [one.trace.request.images[0], str(tmp_path / "second.png")]
    assert all(r.image is not None and r.image.tobytes() == frame.tobytes() for r in requests(pipe))


@pytest.mark.parametrize(
    ("arguments", "documented", "alias"),
    [
        ({"num_inference_steps": 4, "steps": 4}, "num_inference_steps=", "steps="),
        ({"guidance_scale": 1.0, "guidance": 2.0}, "guidance_scale=", "guidance="),
        ({"image": Image.new("RGB", (8, 8)), "images": Image.new("RGB", (8, 8))}, "image=", "images="),
    ],
)
def test_both_forms_of_one_setting_is_an_error_naming_both(
    tmp_path: Path, arguments: dict[str, Any], documented: str, alias: str
) -> None:
    pipe = pipeline()
    with pytest.raises(ConfigError) as caught:
        pipe("<image> Draw a cat", out_dir=tmp_path / "never", **arguments)
    message = str(caught.value)
    assert f"both {documented} and {alias}" in message and f"give only {documented}" in message
    assert not (tmp_path / "never").exists() and requests(pipe) == []


def test_an_unknown_keyword_is_a_type_error_naming_it(tmp_path: Path) -> None:
    pipe = pipeline()
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_steps'"):
        pipe("Draw a cat", out_dir=tmp_path / "never", num_steps=4)  # type: ignore[call-arg]
    assert not (tmp_path / "never").exists() and requests(pipe) == []


def test_the_call_keywords_are_the_per_call_settings_and_their_aliases() -> None:
    assert CallOverrides.__optional_keys__ == set(CALL_KEYS) | set(ALIASES)


def test_max_attempts_is_honoured_for_the_call() -> None:
    pipe = pipeline(critic=verdict(False, "a cat, again"))
    result = pipe("Draw a cat", max_attempts=5)
    attempts = result.trace.steps[0].attempts
    assert len(requests(pipe)) == 5 and [a.forced for a in attempts] == [False] * 4 + [True]
    assert result.trace.settings["loop"]["max_attempts"] == 5  # type: ignore[index]
    pipe("Draw a cat")
    assert len(requests(pipe)) == 5 + 3


@pytest.mark.parametrize(
    ("arguments", "needles"),
    [
        ({"steps": 0}, ["steps=0", "generation.steps", "greater than or equal to 1"]),
        ({"num_inference_steps": 0}, ["num_inference_steps=0", "generation.steps", "greater than or equal"]),
        ({"guidance_scale": "high"}, ["guidance_scale='high'", "generation.guidance"]),
        ({"width": 8}, ["width=8", "generation.width"]),
        ({"max_attempts": "many"}, ["max_attempts='many'", "loop.max_attempts", "valid integer"]),
        ({"guidance": "high"}, ["guidance='high'", "generation.guidance"]),
        ({"max_attempts": 200, "seed": 1}, ["seed=1, max_attempts=200", "loop.seed_stride"]),
    ],
)
def test_a_bad_per_call_value_is_a_config_error_naming_the_argument(
    tmp_path: Path, arguments: dict[str, Any], needles: list[str]
) -> None:
    pipe = pipeline()
    with pytest.raises(ConfigError) as caught:
        pipe("Draw a cat", out_dir=tmp_path / "never", **arguments)
    for needle in needles:
        assert needle in str(caught.value)
    assert not (tmp_path / "never").exists() and requests(pipe) == []


def test_pil_images_are_inputs_like_files(tmp_path: Path) -> None:
    pipe = pipeline(plan=CONTINUE)
    frame = Image.new("RGB", (32, 32), (200, 30, 30))
    result = pipe("<image> What happens next?", images=frame, out_dir=tmp_path / "pil")
    (name,) = result.trace.request.images
    assert name.startswith("<PIL.Image 1: 32x32, sha256 ") and result.trace.input_images == ["input_1.png"]
    (request,) = requests(pipe)
    assert request.image is not None and request.image.tobytes() == frame.tobytes()
    with Image.open(tmp_path / "pil" / "images" / "input_1.png") as saved:
        assert saved.tobytes() == frame.tobytes()
    # Files and images mix, in marker order; the same pixels get the same name (a resume finds its run).
    frame.save(tmp_path / "second.png")
    mixed = pipe("<image> then <image>: next?", images=[frame.copy(), tmp_path / "second.png"])
    assert mixed.trace.request.images == [name, str(tmp_path / "second.png")]


def test_an_input_that_is_no_image_is_an_input_error() -> None:
    pipe = pipeline()
    with pytest.raises(InputError, match=r"Input image 2 is a bytes; give a file path or a PIL.Image"):
        pipe("<image> <image> next?", images=[Image.new("RGB", (8, 8)), b"\x89PNG"])  # type: ignore[list-item]


def test_from_preset_sets_device_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Pipeline, "from_config", classmethod(lambda cls, cfg: cfg))
    cfg: Any = Pipeline.from_preset("tiny", device="cpu", dtype="float32", loop={"max_attempts": 2})
    assert (cfg.preset, cfg.model.device, cfg.model.dtype, cfg.loop.max_attempts) == (
        "tiny",
        "cpu",
        "float32",
        2,
    )
    merged = preset_config(
        "tiny", device="cpu", dtype=None, overrides={"model": {"attn_implementation": "sdpa"}}
    )
    assert (merged.model.device, merged.model.dtype, merged.model.attn_implementation) == (
        "cpu",
        "auto",
        "sdpa",
    )
    with pytest.raises(ConfigError, match=r"model\.dtype"):
        preset_config("tiny", device=None, dtype=["float32"], overrides={})  # type: ignore[arg-type]


class Anonymous(ImageBatchMixin):
    """A generator with no name at all: the trace falls back to its class."""

    def generate(self, request: ImageRequest) -> Image.Image:
        return Image.new("RGB", (request.width, request.height))


class Metered(VLMBatchMixin):
    """A wrapper with a name of its own that keeps the wrapped backend as ``inner``, as the limiters do."""

    def __init__(self, inner: VLMBackend) -> None:
        self.inner, self.name = inner, "metered"

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        return self.inner.chat(messages, **options)


def test_the_trace_records_the_backends_that_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        specs.VLM_BACKENDS,
        "scripted",
        lambda spec, options, role: ScriptedVLMBackend([verdict(True)], name="x"),
    )
    loaded = specs.load_vlm_backend("scripted:critic", role="critic")
    assert getattr(loaded, "spec", None) == "scripted:critic"
    pipe = Pipeline(
        planner=ScriptedVLMBackend([ONE_STEP], name="my-planner"),
        critic=Metered(loaded),  # looked through to the spec it was loaded from
        generator=Anonymous(),  # type: ignore[arg-type]  # no `name` on purpose: the trace uses its class
        config=PipelineConfig.resolve(preset="tiny"),  # the config names tiny models; none of them ran
        templates=builtin_templates(),
    )
    trace = pipe("Draw a cat").trace
    assert trace.backends == {"planner": "my-planner", "critic": "scripted:critic", "generator": "Anonymous"}


def test_a_backend_description_is_one_bounded_line() -> None:
    backend = ScriptedVLMBackend([], name="evil\nname " + "x" * 1000)
    description = backend_description(backend)
    assert "\n" not in description and len(description) == 300 and description.startswith("evil name x")


@pytest.mark.slow
def test_tiny_preset_on_cpu_records_its_specs() -> None:
    pipe = Pipeline.from_preset(
        "tiny",
        device="cpu",
        loop={"planner_fallback": "single-step", "max_attempts": 1},
        agents={"max_new_tokens": 48, "max_parse_attempts": 1},
    )
    with pipe:
        result = pipe("Draw a cat", seed=3, steps=1)
    assert pipe.config.model.device == "cpu"
    assert result.trace.backends == {
        "planner": "tiny:planner-sft",
        "critic": "tiny:critic-sft",
        "generator": "tiny:generator",
    }
    assert result.trace.steps[0].attempts[0].seed == 103
