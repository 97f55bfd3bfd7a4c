"""The "tiny" preset: real Qwen3-VL and FLUX.2-klein classes with random weights at toy size.

Why: tests, CI and demos need the whole pipeline (planner, critic, generator) to run offline on a
CPU in seconds, through the *same* loading code as real checkpoints. So instead of mocks we build
the real model classes with tiny configs, save them with ``save_pretrained`` and let callers load
them with ``AutoProcessor`` / ``AutoModelForImageTextToText`` / ``DiffusionPipeline`` as usual.
Everything is seeded, so two builds with the same seed give byte-identical weights.

Heavy libraries (torch, transformers, diffusers, tokenizers) are imported inside functions so that
importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import cache_home
from interleave_thinker.tiny.pinned import run_pinned
from interleave_thinker.tiny.shipped import install_shipped, library_versions
from interleave_thinker.tiny.tokenizer import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    build_tiny_tokenizer,
)

TINY_DIR_ENV = "INTERLEAVE_THINKER_TINY_DIR"
COMPLETE_MARKER = ".complete"
TINY_PRESET_VERSION = "2"
"""Written into the marker; bump it when dimensions change so stale caches get rebuilt."""

PLANNER_SEED = 1
CRITIC_SEED = 2
GENERATOR_SEED = 3

# --- Tiny Qwen3-VL -----------------------------------------------------------------------------
VLM_TEXT_HIDDEN = 32
VLM_HEAD_DIM = 16  # text mrope sections must sum to head_dim // 2 = 8
VLM_MROPE_SECTION = (4, 2, 2)
VLM_VISION_HIDDEN = 32  # 2 heads -> vision head_dim 16 (axial rope needs a multiple of 4)
VLM_PATCH_SIZE = 16
VLM_MERGE_SIZE = 2
VLM_MIN_PIXELS = 32 * 32  # one merged 2x2 block of 16 px patches
VLM_MAX_PIXELS = 128 * 128  # caps any image (e.g. a 1024x1024 canvas) at 8x8 patches = 16 tokens

# --- Tiny FLUX.2-klein -------------------------------------------------------------------------
FLUX_TEXT_HIDDEN = 16
FLUX_TEXT_LAYERS = 27
"""The pipeline's default ``text_encoder_out_layers=(9, 18, 27)`` indexes hidden_states[27]."""
FLUX_TEXT_OUT_LAYERS = 3
FLUX_VAE_CHANNELS = (8, 8, 8, 8)  # 4 blocks -> VAE factor 8, like the real VAE
FLUX_LATENT_CHANNELS = 4
FLUX_SIZE_MULTIPLE = 2 ** (len(FLUX_VAE_CHANNELS) - 1) * 2
"""Width/height multiple (VAE factor x 2x2 latent patching) = 16; other sizes are floored to it."""


@dataclass(frozen=True)
class TinyModelPaths:
    """Where the three tiny checkpoints live (each a normal ``save_pretrained`` folder)."""

    planner: Path
    critic: Path
    generator: Path


def default_tiny_dir() -> Path:
    """Cache root: ``$INTERLEAVE_THINKER_TINY_DIR`` if set, else ``<home>/tiny`` (see ``core.paths``)."""
    env = os.environ.get(TINY_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return cache_home() / "tiny"


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch for one module's construction without disturbing the caller's RNG state."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def deterministic_torch(threads: int) -> Iterator[None]:
    """Fixed intra-op thread count and torch's deterministic algorithms for a block (restored after).

    Why: training the tiny models must give the same weights on every machine, and a machine with
    more cores otherwise splits reductions differently. oneDNN and NNPACK are off for the block: they
    choose their blocking (so the order of a convolution's sums) from the machine's cache sizes, where
    ATen's own kernels and MKL's reproducible branch do not. CPU kernel choice (AVX2 vs AVX-512) cannot be
    changed once torch is loaded; it is pinned through the environment (``tiny.pinned``).
    """
    import torch

    old_threads, old_mode = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.backends.mkldnn.flags(enabled=False), torch.backends.nnpack.flags(enabled=False):
            yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_mode)


def build_tiny_vlm(dest: Path, *, seed: int) -> Path:
    """Build a random tiny Qwen3-VL (model, processor, generation config) and save it into ``dest``.

    Why these pieces: ``Qwen3VLProcessor`` needs a tokenizer with the vision control tokens, the
    ``Qwen2VLImageProcessor`` (patch 16, merge 2, pixel cap so big canvases stay a few tokens) and a
    ``Qwen3VLVideoProcessor``; the model's image/video token ids must match the tokenizer's.
    """
    from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    dest = Path(dest)
    tokenizer = build_tiny_tokenizer()
    tok_id: Callable[[str], int] = tokenizer.convert_tokens_to_ids
    processor = _tiny_vlm_processor(tokenizer)
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": VLM_TEXT_HIDDEN,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": VLM_HEAD_DIM,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": list(VLM_MROPE_SECTION),
                "mrope_interleaved": True,
            },
            "pad_token_id": tok_id(ENDOFTEXT),
        },
        vision_config={
            "depth": 2,
            "hidden_size": VLM_VISION_HIDDEN,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": VLM_PATCH_SIZE,
            "spatial_merge_size": VLM_MERGE_SIZE,
            "temporal_patch_size": 2,
            "out_hidden_size": VLM_TEXT_HIDDEN,
            "num_position_embeddings": 64,  # an 8x8 learned grid, interpolated per image
            "deepstack_visual_indexes": [0],
        },
        image_token_id=tok_id(IMAGE_PAD),
        video_token_id=tok_id(VIDEO_PAD),
        vision_start_token_id=tok_id(VISION_START),
        vision_end_token_id=tok_id(VISION_END),
        tie_word_embeddings=False,
    )
    with seeded(seed):
        model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        do_sample=False,
        eos_token_id=[tok_id(IM_END), tok_id(ENDOFTEXT)],
        pad_token_id=tok_id(ENDOFTEXT),
    )

    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    processor.save_pretrained(dest)
    return dest


def _tiny_vlm_processor(tokenizer: Any) -> Any:
    """The tiny VLM's ``Qwen3VLProcessor``: the tokenizer, and image and video processors that cut
    pictures into the patches the vision tower takes (its ``vision_config`` in :func:`build_tiny_vlm`)."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    patching = {"patch_size": VLM_PATCH_SIZE, "temporal_patch_size": 2, "merge_size": VLM_MERGE_SIZE}
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": VLM_MIN_PIXELS, "longest_edge": VLM_MAX_PIXELS},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        **patching,
    )
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": VLM_MIN_PIXELS, "longest_edge": VLM_MAX_PIXELS * 2},
        max_frames=8,
        **patching,
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def build_tiny_flux2_klein(dest: Path, *, seed: int) -> Path:
    """Build a random tiny ``Flux2KleinPipeline`` and save the whole pipeline into ``dest``.

    Why 27 text-encoder layers: the pipeline stacks ``hidden_states[9, 18, 27]`` by default, so the
    Qwen3 text encoder needs at least 27 layers to run with default call arguments; they are 16 wide,
    so this stays tiny. The transformer's ``joint_attention_dim`` is 3 x that width accordingly.
    """
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dest = Path(dest)
    tokenizer = build_tiny_tokenizer()
    text_config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=FLUX_TEXT_HIDDEN,
        intermediate_size=32,
        num_hidden_layers=FLUX_TEXT_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
    )
    # Distinct derived seeds per module: each build is reproducible and modules are not identical.
    with seeded(seed * 1000 + 1):
        text_encoder = Qwen3ForCausalLM(text_config).eval()
    with seeded(seed * 1000 + 2):
        vae = AutoencoderKLFlux2(
            block_out_channels=FLUX_VAE_CHANNELS,
            layers_per_block=1,
            latent_channels=FLUX_LATENT_CHANNELS,
            norm_num_groups=4,
            sample_size=64,
            mid_block_add_attention=False,  # keeps a 1024x1024 reference image cheap to encode
        )
    with seeded(seed * 1000 + 3):
        transformer = Flux2Transformer2DModel(
            patch_size=1,
            in_channels=FLUX_LATENT_CHANNELS * 4,  # latents are 2x2-patchified before packing
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=FLUX_TEXT_OUT_LAYERS * FLUX_TEXT_HIDDEN,
            timestep_guidance_channels=32,
            mlp_ratio=2.0,
            axes_dims_rope=(4, 4, 4, 4),  # sums to attention_head_dim
            guidance_embeds=False,  # klein does not embed guidance
        )
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=3.0,
        use_dynamic_shifting=True,  # the pipeline always passes ``mu``
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    pipe = Flux2KleinPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=True,
    )
    dest.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(dest)
    return dest


def _is_complete(folder: Path) -> bool:
    """A folder counts only if its marker exists and names the current preset version."""
    marker = folder / COMPLETE_MARKER
    try:
        return marker.read_text(encoding="utf-8").strip() == TINY_PRESET_VERSION
    except OSError:
        return False


BUILDERS: dict[str, Callable[..., Path]] = {
    "planner": build_tiny_vlm,
    "critic": build_tiny_vlm,
    "generator": build_tiny_flux2_klein,
}


SEEDS = {"planner": PLANNER_SEED, "critic": CRITIC_SEED, "generator": GENERATOR_SEED}


def tiny_recipe(name: str) -> dict[str, object]:
    """What a tiny model's bytes depend on: a shipped copy is used only when this matches its manifest."""
    libraries = library_versions("torch", "transformers", "diffusers", "tokenizers")
    return {
        "model": f"tiny/{name}",
        "version": TINY_PRESET_VERSION,
        "seed": SEEDS[name],
        "libraries": libraries,
    }


def _ensure_one(root: Path, name: str) -> Path:
    """Reuse ``root/name`` if complete, else fill (shipped copy) or build it in a sibling temp folder and
    rename it in."""
    final = root / name
    if _is_complete(final):
        return final
    if final.is_dir() and not final.is_symlink():  # half-built or stale: never trust it
        shutil.rmtree(final)
    elif final.exists() or final.is_symlink():
        final.unlink()
    tmp = root / f".{name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    if not install_shipped(name, tiny_recipe(name), tmp):
        args = ["-m", "interleave_thinker.tiny.models", name, str(tmp), str(SEEDS[name])]
        run_pinned(args, f"the tiny {name}")
    (tmp / COMPLETE_MARKER).write_text(TINY_PRESET_VERSION + "\n", encoding="utf-8")
    tmp.rename(final)
    return final


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock so concurrent processes never build the same cache at once (``flock``: the kernel
    drops it when its holder dies, so a killed build never blocks the next one)."""
    from filelock import UnixFileLock

    with UnixFileLock(path, preserve_lock_file=True):
        yield


def ensure_tiny_model(name: str, root: Path | None = None) -> Path:
    """One tiny model folder (``planner``, ``critic`` or ``generator``), filled or built only if missing."""
    root = Path(root) if root is not None else default_tiny_dir()
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".lock"):
        return _ensure_one(root, name)


def ensure_tiny_models(root: Path | None = None) -> TinyModelPaths:
    """Return the tiny planner/critic/generator folders, making any that are missing.

    Idempotent and crash-safe: complete folders (marker present, same preset version) are reused
    as-is; anything else is removed and remade atomically under a file lock, from the shipped copy
    when one fits (``tiny.shipped``), else built.
    """
    paths = {name: ensure_tiny_model(name, root) for name in SEEDS}
    return TinyModelPaths(planner=paths["planner"], critic=paths["critic"], generator=paths["generator"])


if (
    __name__ == "__main__"
):  # the child process of run_pinned: python -m interleave_thinker.tiny.models NAME DEST SEED
    import sys

    BUILDERS[sys.argv[1]](Path(sys.argv[2]), seed=int(sys.argv[3]))
