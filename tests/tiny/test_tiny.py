"""Tests for the tiny preset: real model classes, random weights, loaded like real checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.tiny import models as tiny
from interleave_thinker.tiny.models import (
    COMPLETE_MARKER,
    TINY_DIR_ENV,
    TinyModelPaths,
    build_tiny_flux2_klein,
    build_tiny_vlm,
    default_tiny_dir,
    ensure_tiny_models,
)


def _white(size: tuple[int, int]) -> Any:
    from PIL import Image

    return Image.new("RGB", size, "white")


def _safetensors(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.safetensors"))}


def _state_dict(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _tensors_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def tiny_paths(tmp_path_factory: pytest.TempPathFactory) -> TinyModelPaths:
    return ensure_tiny_models(tmp_path_factory.mktemp("tiny"))


def test_default_tiny_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TINY_DIR_ENV, str(tmp_path / "x"))
    assert default_tiny_dir() == tmp_path / "x"
    monkeypatch.delenv(TINY_DIR_ENV)
    monkeypatch.setenv("INTERLEAVE_THINKER_HOME", str(tmp_path / "home"))
    assert default_tiny_dir() == tmp_path / "home" / "tiny"
    monkeypatch.delenv("INTERLEAVE_THINKER_HOME")
    assert default_tiny_dir() == Path.home() / ".cache" / "interleave-thinker" / "tiny"


@pytest.mark.slow
def test_vlm_loads_through_auto_classes(tiny_paths: TinyModelPaths) -> None:
    from transformers import (
        AutoModelForImageTextToText,
        AutoProcessor,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )

    processor = AutoProcessor.from_pretrained(tiny_paths.planner)
    model = AutoModelForImageTextToText.from_pretrained(tiny_paths.planner)
    assert isinstance(processor, Qwen3VLProcessor)
    assert isinstance(model, Qwen3VLForConditionalGeneration)
    tok = processor.tokenizer
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert model.config.text_config.vocab_size == len(tok)
    assert model.generation_config.do_sample is False
    assert tok.convert_tokens_to_ids("<|im_end|>") in model.generation_config.eos_token_id
    for token in ("<think>", "</think>", "<|im_start|>", "<|vision_start|>", "<|video_pad|>"):
        assert len(tok(token)["input_ids"]) == 1, token


@pytest.mark.slow
def test_chat_template_renders_chatml(tiny_paths: TinyModelPaths) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_paths.critic)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Check it."}]},
    ]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Check it.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.slow
def test_vlm_two_image_chat_generates(tiny_paths: TinyModelPaths) -> None:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_paths.planner)
    model = AutoModelForImageTextToText.from_pretrained(tiny_paths.planner)
    # 64x64 -> 4x4 patches of 16 px -> 4 tokens after 2x2 merge; 1024x1024 is capped at 128x128 -> 16.
    images = [_white((64, 64)), _white((1024, 1024))]
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": images[0]},
                {"type": "image", "image": images[1]},
                {"type": "text", "text": "{'execution_plan': [{'step_number': 1}]}"},
            ],
        }
    ]
    inputs = processor.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    n_pad = int((inputs["input_ids"] == image_pad).sum())
    expected = int(inputs["image_grid_thw"].prod(dim=-1).sum()) // 4
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 4], [1, 8, 8]]
    assert n_pad == expected == 4 + 16

    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=6)
    new_tokens = out[:, inputs["input_ids"].shape[1] :]
    assert 1 <= new_tokens.shape[1] <= 6
    texts = processor.batch_decode(new_tokens, skip_special_tokens=True)
    assert len(texts) == 1 and isinstance(texts[0], str)
    with torch.no_grad():  # greedy: the same input gives the same tokens
        again = model.generate(**inputs, max_new_tokens=6)
    assert torch.equal(out, again)


@pytest.mark.slow
def test_builds_are_deterministic(tiny_paths: TinyModelPaths, tmp_path: Path) -> None:
    a = build_tiny_vlm(tmp_path / "a", seed=1)
    b = build_tiny_vlm(tmp_path / "b", seed=1)
    assert _safetensors(a) == _safetensors(b)  # byte-identical files
    assert _tensors_equal(_state_dict(a), _state_dict(tiny_paths.planner))
    assert not _tensors_equal(_state_dict(tiny_paths.planner), _state_dict(tiny_paths.critic))
    assert (a / "tokenizer.json").read_bytes() == (tiny_paths.critic / "tokenizer.json").read_bytes()

    g = build_tiny_flux2_klein(tmp_path / "g", seed=3)
    assert _safetensors(g) == _safetensors(tiny_paths.generator)
    g2 = build_tiny_flux2_klein(tmp_path / "g2", seed=4)
    assert _safetensors(g2) != _safetensors(g)


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["Flux2KleinPipeline", "DiffusionPipeline"])
def test_flux_text_to_image_and_edit(tiny_paths: TinyModelPaths, loader: str) -> None:
    import diffusers
    import torch

    pipe = getattr(diffusers, loader).from_pretrained(tiny_paths.generator)
    assert isinstance(pipe, diffusers.Flux2KleinPipeline)
    pipe.set_progress_bar_config(disable=True)
    cases = [
        ((64, 64), None),
        ((128, 64), None),
        ((64, 128), _white((96, 80))),
        ((128, 128), _white((1024, 1024))),
    ]
    for (width, height), image in cases:
        out = pipe(
            prompt="a red cat on a white table",
            image=image,
            width=width,
            height=height,
            num_inference_steps=2,
            guidance_scale=1.0,
            generator=torch.Generator("cpu").manual_seed(7),
        )
        assert out.images[0].size == (width, height)


@pytest.mark.slow
def test_ensure_reuses_complete_folders(tiny_paths: TinyModelPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Path:
        raise AssertionError("a complete folder must not be rebuilt")

    monkeypatch.setattr(tiny, "build_tiny_vlm", boom)
    monkeypatch.setattr(tiny, "build_tiny_flux2_klein", boom)
    files = [tiny_paths.planner / "model.safetensors", tiny_paths.generator / COMPLETE_MARKER]
    before = [f.stat().st_mtime_ns for f in files]
    again = ensure_tiny_models(tiny_paths.planner.parent)
    assert again == tiny_paths
    assert [f.stat().st_mtime_ns for f in files] == before


@pytest.mark.slow
def test_ensure_rebuilds_folder_without_marker(tiny_paths: TinyModelPaths, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    shutil.copytree(tiny_paths.critic, root / "critic")
    shutil.copytree(tiny_paths.generator, root / "generator")
    (root / "planner").mkdir()  # what a crash mid-build could leave behind
    (root / "planner" / "junk.bin").write_bytes(b"half written")
    (root / ".planner.partial").mkdir()
    critic_mtime = (root / "critic" / "model.safetensors").stat().st_mtime_ns

    paths = ensure_tiny_models(root)
    assert not (paths.planner / "junk.bin").exists()
    assert not (root / ".planner.partial").exists()
    assert (paths.planner / COMPLETE_MARKER).is_file()
    assert _tensors_equal(_state_dict(paths.planner), _state_dict(tiny_paths.planner))
    assert (root / "critic" / "model.safetensors").stat().st_mtime_ns == critic_mtime


@pytest.mark.slow
def test_diffusers_backend_is_safe_to_call_from_threads(tiny_paths: TinyModelPaths) -> None:
    """The reward scorer and the batch runtime call one backend from several threads; the images must be
    the ones each call would get alone (an unguarded pipeline shares its scheduler state across calls)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from interleave_thinker.backends.image.diffusers_backend import DiffusersImageBackend

    backend = DiffusersImageBackend(str(tiny_paths.generator), device="cpu", dtype="float32")
    jobs = [ImageRequest(f"a red cat number {i}", width=64, height=64, seed=i, steps=3) for i in range(6)]
    alone = [np.asarray(backend.generate(job)) for job in jobs]
    with ThreadPoolExecutor(6) as pool:
        together = [np.asarray(image) for image in pool.map(lambda job: backend.generate(job), jobs)]
    for i, (a, b) in enumerate(zip(alone, together, strict=True)):
        assert np.array_equal(a, b), f"job {i} differs when run beside others"


@pytest.mark.slow
def test_transformers_backend_batches_from_threads_match_alone(tiny_paths: TinyModelPaths) -> None:
    """Padded batches sent from several threads get the replies they get alone (greedy decoding)."""
    from concurrent.futures import ThreadPoolExecutor

    from interleave_thinker.backends.vlm.transformers_backend import TransformersVLMBackend

    backend = TransformersVLMBackend(str(tiny_paths.critic), device="cpu", dtype="float32")
    batches = [
        [
            [{"role": "user", "content": [{"type": "text", "text": "hi " * (1 + i)}]}],
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": f"a much longer question number {i} " * 3}],
                }
            ],
        ]
        for i in range(4)
    ]
    alone = [backend.chat_batch(b, max_new_tokens=8) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda b: backend.chat_batch(b, max_new_tokens=8), batches))
    assert together == alone
    assert backend.processor.tokenizer.padding_side == "left"
