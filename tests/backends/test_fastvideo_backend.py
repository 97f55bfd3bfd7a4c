"""The fastvideo backend against the stand-in ``fastvideo`` package (FastVideo needs a CUDA GPU).

The stand-in (:mod:`interleave_thinker.testing.doubles.fastvideo`) speaks FastVideo 0.2.0's typed API:
``from_pretrained`` with its convenience kwargs, ``fastvideo.api.parse_config(GenerationRequest, raw)``
refusing unknown fields, ``generate(GenerationRequest) -> GenerationResult``; it has no ``generate_video``.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from interleave_thinker.backends.image.fastvideo_backend import (
    FastVideoImageBackend,
    FastVideoOptions,
    frame_to_image,
    parse_target,
)
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.specs import check_specs, load_image_backend
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.runtime.scheduler import default_limit
from interleave_thinker.testing.doubles.fastvideo import (
    FakeVideoGenerator,
    GenerationRequest,
    install_fastvideo,
)

KLEIN = "black-forest-labs/FLUX.2-klein-4B"
OFFLOAD_FLAGS = (
    "dit_cpu_offload",
    "dit_layerwise_offload",
    "text_encoder_cpu_offload",
    "image_encoder_cpu_offload",
    "vae_cpu_offload",
)


@pytest.fixture(autouse=True)
def fake_fastvideo(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    return install_fastvideo(monkeypatch)


def make(model: str = KLEIN, **kwargs: object) -> tuple[FastVideoImageBackend, FakeVideoGenerator]:
    backend = FastVideoImageBackend(model, **kwargs)  # type: ignore[arg-type]
    assert isinstance(backend.generator, FakeVideoGenerator)
    return backend, backend.generator


def test_text_to_image_is_one_typed_request() -> None:
    backend, generator = make()
    with backend:
        image = backend.generate(ImageRequest("a lighthouse at dusk", width=512, height=768, seed=205))
        scratch = backend._scratch
        assert scratch.is_dir()
    assert generator.model_path == KLEIN and generator.load_kwargs == {"num_gpus": 1}
    [request] = generator.requests
    assert isinstance(request, GenerationRequest)
    assert request.prompt == "a lighthouse at dusk" and request.negative_prompt is None
    assert request.explicit == {
        "prompt",
        "sampling.num_frames",
        "sampling.fps",
        "sampling.height",
        "sampling.width",
        "sampling.seed",
        "sampling.num_inference_steps",
        "sampling.guidance_scale",
        "output.output_path",
        "output.save_video",
        "output.return_frames",
    }
    s = request.sampling
    assert (s.num_frames, s.fps, s.height, s.width, s.seed) == (1, 1, 768, 512, 205)
    assert (s.num_inference_steps, s.guidance_scale) == (4, 1.0)  # FLUX.2-klein as released
    assert request.output.output_path == str(scratch) and request.output.save_video is False
    assert image.size == (512, 768) and image.mode == "RGB"
    assert image.getpixel((10, 10)) == (205, 40, 77)
    assert generator.shutdowns == 1 and not scratch.exists()


def test_explicit_steps_and_guidance_win_and_unknown_models_keep_fastvideo_presets() -> None:
    backend, generator = make()
    with backend:
        backend.generate(ImageRequest("p", steps=8, guidance=2.5))
    assert generator.requests[0].sampling.num_inference_steps == 8
    assert generator.requests[0].sampling.guidance_scale == 2.5
    other, other_gen = make("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", options=FastVideoOptions(num_gpus=2))
    with other:
        other.generate(ImageRequest("p", width=64, height=64))
    assert other_gen.load_kwargs == {"num_gpus": 2}
    explicit = other_gen.requests[0].explicit
    assert "sampling.num_inference_steps" not in explicit and "sampling.guidance_scale" not in explicit


def test_spec_options_reach_from_pretrained_and_every_request() -> None:
    spec = f"fastvideo:{KLEIN}#num_gpus=2&offload=text_encoder,vae&negative_prompt=blurry%2C%20low%20quality&true_cfg_scale=4"
    backend = load_image_backend(spec)
    assert isinstance(backend, FastVideoImageBackend) and backend.name == f"fastvideo:{KLEIN}"
    [generator] = FakeVideoGenerator.loaded
    with backend:
        backend.generate(ImageRequest("a cat", seed=1))
        backend.generate(ImageRequest("a hat", image=Image.new("RGB", (8, 8)), seed=2))
    assert generator.load_kwargs == {
        "num_gpus": 2,
        "dit_cpu_offload": False,
        "dit_layerwise_offload": False,
        "text_encoder_cpu_offload": True,
        "image_encoder_cpu_offload": False,
        "vae_cpu_offload": True,
    }
    for request in generator.requests:
        assert request.negative_prompt == "blurry, low quality"
        assert request.sampling.true_cfg_scale == 4.0
        assert {"negative_prompt", "sampling.true_cfg_scale"} <= request.explicit


@pytest.mark.parametrize(
    ("fragment", "kwargs"),
    [
        ("offload=all", dict.fromkeys(OFFLOAD_FLAGS, True)),
        ("offload=none", dict.fromkeys(OFFLOAD_FLAGS, False)),
        ("", {}),
    ],
)
def test_offload_all_none_and_unset(fragment: str, kwargs: dict[str, bool]) -> None:
    _, options = parse_target(f"{KLEIN}#{fragment}")
    assert options.load_kwargs() == {"num_gpus": 1, **kwargs}


@pytest.mark.parametrize(
    ("fragment", "message"),
    [
        ("num_gpus=0", "option num_gpus must be a whole number of at least 1, got '0'"),
        ("num_gpus=two", "option num_gpus must be a whole number of at least 1, got 'two'"),
        ("offload=gpu,vae", "option offload names unknown part(s) gpu; use all, none or a comma list of"),
        ("true_cfg_scale=0.5", "option true_cfg_scale must be a number from 1 to 100 (1 = off), got '0.5'"),
        ("true_cfg_scale=lots", "option true_cfg_scale must be a number from 1 to 100 (1 = off), got 'lots'"),
        (
            "guidance=3",
            "unknown option 'guidance'; known: num_gpus, offload, negative_prompt, true_cfg_scale",
        ),
        ("num_gpus", "option num_gpus has no value; write name=value"),
        ("num_gpus=1&num_gpus=2", "option num_gpus is given twice"),
    ],
)
def test_bad_options_are_one_line_config_errors_naming_the_option(fragment: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_image_backend(f"fastvideo:{KLEIN}#{fragment}")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not FakeVideoGenerator.loaded  # refused before any model loads


def test_check_specs_refuses_a_bad_option_before_loading() -> None:
    config = PipelineConfig(planner="tiny:", critic="tiny:", generator=f"fastvideo:{KLEIN}#num_gpus=-1")
    with pytest.raises(ConfigError, match="option num_gpus must be a whole number"):
        check_specs(config)


def test_edit_passes_the_image_as_a_png_path() -> None:
    backend, generator = make()
    source = Image.new("RGB", (640, 480), (10, 200, 30))
    with backend:
        result = backend.generate(ImageRequest("make it autumn", image=source, width=640, height=480, seed=3))
        [request] = generator.requests
        assert request.inputs.image_path is not None
        path = Path(request.inputs.image_path)
        assert path.parent == backend._scratch and path.suffix == ".png"
        assert not path.exists()  # removed after the call
    assert generator.input_pixels == [(10, 200, 30)] and generator.input_sizes == [(640, 480)]
    assert request.sampling.seed == 3 and request.sampling.num_frames == 1
    assert result.size == (640, 480) and result.getpixel((0, 0)) == (245, 55, 225)


def test_other_output_size_is_fitted_to_the_request() -> None:
    backend, generator = make()
    generator.align = 16
    with backend:
        image = backend.generate(ImageRequest("p", width=1000, height=600, seed=9))
    assert generator.requests[0].sampling.width == 1000
    assert image.size == (1000, 600) and image.getpixel((500, 300)) == (9, 40, 77)


def test_generation_failure_is_a_backend_error() -> None:
    backend, _ = make()
    with backend, pytest.raises(BackendError, match="generation failed: RuntimeError: CUDA out of memory"):
        backend.generate(ImageRequest("explode"))


def test_load_failure_is_a_backend_error() -> None:
    with pytest.raises(
        BackendError, match=r"could not load the model \(ValueError: Model path does not exist"
    ):
        FastVideoImageBackend("missing/model")


def test_empty_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="fastvideo:MODEL"):
        FastVideoImageBackend(" ")
    with pytest.raises(ConfigError, match="fastvideo:MODEL"):
        parse_target("#num_gpus=2")


def test_frame_conversion() -> None:
    floats = np.full((2, 3, 3), 0.5, dtype=np.float32)
    assert frame_to_image(floats).getpixel((0, 0)) == (128, 128, 128)
    with pytest.raises(BackendError, match=r"shape \(3, 2, 2\)"):
        frame_to_image(np.zeros((3, 2, 2), dtype=np.uint8))


def test_not_installed_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastvideo", None)
    with pytest.raises(BackendError, match=r"pip install 'interleave-thinker\[fastvideo\]'") as info:
        FastVideoImageBackend(KLEIN)
    assert isinstance(info.value.__cause__, ImportError)


def test_a_fastvideo_without_the_typed_api_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    old_api = types.ModuleType("fastvideo.api")  # before 0.2.0: no GenerationRequest
    monkeypatch.setitem(sys.modules, "fastvideo.api", old_api)
    with pytest.raises(BackendError, match=r"needs FastVideo 0\.2\.0 or newer"):
        FastVideoImageBackend(KLEIN)


def test_registry_imports_fastvideo_and_runs_a_batch() -> None:
    backend = load_image_backend(f"fastvideo:{KLEIN}")
    assert isinstance(backend, FastVideoImageBackend)
    [generator] = FakeVideoGenerator.loaded
    try:
        first, second = backend.generate_batch(
            [ImageRequest("one", seed=100, width=32, height=32), ImageRequest("two", seed=101)]
        )
    finally:
        backend.close()
        backend.close()  # a second close does nothing
    assert [r.prompt for r in generator.requests] == ["one", "two"]
    assert first.size == (32, 32) and first.getpixel((0, 0)) == (100, 40, 77)
    assert second.size == (1024, 1024) and second.getpixel((0, 0)) == (101, 40, 77)
    assert generator.shutdowns == 1


def test_a_batch_gives_fastvideo_one_slot_like_other_local_kinds() -> None:
    assert default_limit(f"fastvideo:{KLEIN}", 8, micro_batch=False) == 1
    assert default_limit("http:127.0.0.1:9", 8, micro_batch=False) == 8
