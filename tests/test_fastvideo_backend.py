"""The fastvideo backend against a fake ``fastvideo.VideoGenerator`` (FastVideo needs a CUDA GPU).

The fake implements exactly what the backend calls, as in ``hao-ai-lab/FastVideo``:
``VideoGenerator.from_pretrained(model_path, **kwargs)``, ``generate_video(prompt=..., **kwargs)`` whose
kwargs must be ``SamplingParam`` fields (the real ``SamplingParam.update`` raises ``ValueError`` on
others), the result dict with ``"frames"`` (one ``H x W x 3`` uint8 array per frame), and ``shutdown()``.
Like the real ``_prepare_output_path`` it creates ``output_path`` even when nothing is saved.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from PIL import Image

from interleave_thinker.backends.image.fastvideo_backend import FastVideoImageBackend, frame_to_image
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.specs import load_image_backend
from interleave_thinker.core.errors import BackendError, ConfigError

KLEIN = "black-forest-labs/FLUX.2-klein-4B"
# A subset of the real SamplingParam fields (fastvideo/api/sampling_param.py).
SAMPLING_FIELDS = {
    "image_path", "pil_image", "video_path", "prompt", "negative_prompt", "prompt_path", "output_path",
    "output_video_name", "num_videos_per_prompt", "seed", "num_frames", "height", "width", "fps",
    "num_inference_steps", "guidance_scale", "true_cfg_scale", "guidance_rescale", "save_video",
    "return_frames", "return_trajectory_latents", "return_trajectory_decoded",
}  # fmt: skip


@dataclass
class VideoCall:
    prompt: str | None
    kwargs: dict[str, Any]
    input_pixels: tuple[int, ...] | None  # pixel (0, 0) of the file at image_path, read during the call
    input_size: tuple[int, int] | None


class FakeVideoGenerator:
    """Stands in for ``fastvideo.VideoGenerator``; records loads, calls and shutdown."""

    loaded: ClassVar[list[FakeVideoGenerator]] = []

    def __init__(self, model_path: str, load_kwargs: dict[str, Any]) -> None:
        self.model_path, self.load_kwargs = model_path, load_kwargs
        self.calls: list[VideoCall] = []
        self.shutdowns = 0
        self.align = 1
        FakeVideoGenerator.loaded.append(self)

    @classmethod
    def from_pretrained(cls, model_path: str | None = None, **kwargs: Any) -> FakeVideoGenerator:
        if model_path == "missing/model":
            raise ValueError("Model path does not exist: missing/model")
        assert model_path is not None
        return cls(model_path, kwargs)

    def generate_video(
        self, prompt: str | None = None, sampling_param: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        unknown = sorted(set(kwargs) - SAMPLING_FIELDS)
        if unknown:
            raise ValueError(f"SamplingParam.update() received unknown field(s): {unknown}.")
        if prompt == "explode":
            raise RuntimeError("CUDA out of memory")
        Path(kwargs.get("output_path", "outputs/")).mkdir(parents=True, exist_ok=True)
        source = None
        if kwargs.get("image_path"):
            with Image.open(kwargs["image_path"]) as opened:
                source = opened.convert("RGB")
        pixel = source.getpixel((0, 0)) if source is not None else None
        size = source.size if source is not None else None
        self.calls.append(VideoCall(prompt, dict(kwargs), pixel if isinstance(pixel, tuple) else None, size))
        height = -(-kwargs.get("height", 720) // self.align) * self.align
        width = -(-kwargs.get("width", 1280) // self.align) * self.align
        if source is not None:
            frame = 255 - np.asarray(source.resize((width, height)), dtype=np.uint8)
        else:
            colour = (kwargs.get("seed", 1024) % 256, kwargs.get("num_inference_steps", 50) * 10 % 256, 77)
            frame = np.empty((height, width, 3), dtype=np.uint8)
            frame[...] = colour
        return {
            "prompts": prompt,
            "samples": None,
            "frames": [frame] if kwargs.get("return_frames", True) else None,
            "audio": None,
            "size": (height, width, kwargs.get("num_frames", 125)),
            "generation_time": 0.01,
            "video_path": None,
            "peak_memory_mb": None,
        }

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def fake_fastvideo(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("fastvideo")
    module.VideoGenerator = FakeVideoGenerator  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fastvideo", module)
    FakeVideoGenerator.loaded = []
    return module


def make(model: str = KLEIN, **kwargs: Any) -> tuple[FastVideoImageBackend, FakeVideoGenerator]:
    backend = FastVideoImageBackend(model, generator_factory=FakeVideoGenerator.from_pretrained, **kwargs)
    assert isinstance(backend.generator, FakeVideoGenerator)
    return backend, backend.generator


def test_text_to_image_arguments_and_result() -> None:
    backend, generator = make()
    with backend:
        image = backend.generate(ImageRequest("a lighthouse at dusk", width=512, height=768, seed=205))
        scratch = backend._scratch
        assert scratch.is_dir()
    assert generator.model_path == KLEIN and generator.load_kwargs == {"num_gpus": 1}
    [call] = generator.calls
    assert call.prompt == "a lighthouse at dusk"
    assert call.kwargs == {
        "output_path": str(scratch),
        "save_video": False,
        "return_frames": True,
        "num_frames": 1,
        "fps": 1,
        "height": 768,
        "width": 512,
        "seed": 205,
        "num_inference_steps": 4,  # FLUX.2-klein as released: 4 steps, guidance 1.0
        "guidance_scale": 1.0,
    }
    assert image.size == (512, 768) and image.mode == "RGB"
    assert image.getpixel((10, 10)) == (205, 40, 77)
    assert generator.shutdowns == 1 and not scratch.exists()


def test_explicit_steps_and_guidance_win_and_unknown_models_keep_fastvideo_presets() -> None:
    backend, generator = make()
    with backend:
        backend.generate(ImageRequest("p", steps=8, guidance=2.5))
    assert generator.calls[0].kwargs["num_inference_steps"] == 8
    assert generator.calls[0].kwargs["guidance_scale"] == 2.5
    other, other_gen = make(
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", num_gpus=2, load_kwargs={"vae_cpu_offload": True}
    )
    with other:
        other.generate(ImageRequest("p", width=64, height=64))
    assert other_gen.load_kwargs == {"num_gpus": 2, "vae_cpu_offload": True}
    assert "num_inference_steps" not in other_gen.calls[0].kwargs
    assert "guidance_scale" not in other_gen.calls[0].kwargs


def test_edit_passes_the_image_as_a_png_path() -> None:
    backend, generator = make()
    source = Image.new("RGB", (640, 480), (10, 200, 30))
    with backend:
        result = backend.generate(ImageRequest("make it autumn", image=source, width=640, height=480, seed=3))
        [call] = generator.calls
        path = Path(call.kwargs["image_path"])
        assert path.parent == backend._scratch and path.suffix == ".png"
        assert not path.exists()  # removed after the call
    assert call.input_pixels == (10, 200, 30) and call.input_size == (640, 480)
    assert call.kwargs["seed"] == 3 and call.kwargs["num_frames"] == 1
    assert result.size == (640, 480) and result.getpixel((0, 0)) == (245, 55, 225)


def test_other_output_size_is_fitted_to_the_request() -> None:
    backend, generator = make()
    generator.align = 16
    with backend:
        image = backend.generate(ImageRequest("p", width=1000, height=600, seed=9))
    assert generator.calls[0].kwargs["width"] == 1000
    assert image.size == (1000, 600) and image.getpixel((500, 300)) == (9, 40, 77)


def test_generation_failure_is_a_backend_error() -> None:
    backend, _ = make()
    with backend, pytest.raises(BackendError, match="generation failed: RuntimeError: CUDA out of memory"):
        backend.generate(ImageRequest("explode"))


def test_load_failure_is_a_backend_error() -> None:
    with pytest.raises(
        BackendError, match=r"could not load the model \(ValueError: Model path does not exist"
    ):
        FastVideoImageBackend("missing/model", generator_factory=FakeVideoGenerator.from_pretrained)


def test_empty_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="fastvideo:MODEL"):
        FastVideoImageBackend(" ", generator_factory=FakeVideoGenerator.from_pretrained)


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


def test_registry_imports_fastvideo_and_runs_a_batch(fake_fastvideo: types.ModuleType) -> None:
    backend = load_image_backend(f"fastvideo:{KLEIN}")
    assert isinstance(backend, FastVideoImageBackend)
    assert backend.name == f"fastvideo:{KLEIN}"
    [generator] = FakeVideoGenerator.loaded
    try:
        first, second = backend.generate_batch(
            [ImageRequest("one", seed=100, width=32, height=32), ImageRequest("two", seed=101)]
        )
    finally:
        backend.close()
        backend.close()  # a second close does nothing
    assert [c.prompt for c in generator.calls] == ["one", "two"]
    assert first.size == (32, 32) and first.getpixel((0, 0)) == (100, 40, 77)
    assert second.size == (1024, 1024) and second.getpixel((0, 0)) == (101, 40, 77)
    assert generator.shutdowns == 1
