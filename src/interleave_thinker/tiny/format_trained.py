"""Format-trained tiny models: a tiny planner, critic and judge that our own SFT taught the release's formats.

Why: the random tiny models never write a valid plan, so ``make demo`` could only show the
single-step fallback. These are the same Qwen3-VL class, a little wider and deeper (still ~1M
parameters), with the tiny preset's processor and tokenizer, fully fine-tuned on CPU for a few
hundred steps on :mod:`~interleave_thinker.train.synthetic` data filled with the template set the
pipeline will use. Built once, cached per template set, crash-safe like ``tiny.models``. The judge
(``tiny:judge``) learns from data that scores bright pictures high and dark ones low; after its short
training its quality (PQ) score follows the brightness, its SC score barely does.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from interleave_thinker.core.build_progress import current_reporter
from interleave_thinker.core.prompt_store import TemplateSet, TemplateStore
from interleave_thinker.tiny.models import (
    COMPLETE_MARKER,
    CRITIC_SEED,
    PLANNER_SEED,
    TINY_PRESET_VERSION,
    default_tiny_dir,
    deterministic_torch,
    ensure_tiny_model,
    file_lock,
    seeded,
)
from interleave_thinker.tiny.pinned import PINNED_NUMERICS, progress_callback, run_pinned
from interleave_thinker.tiny.shipped import (
    file_digest,
    install_shipped,
    library_versions,
    model_files,
    recipe_digest,
)
from interleave_thinker.train.sft.config import (
    DataSection,
    ModelSection,
    SFTRunConfig,
    TrainingSection,
)

if TYPE_CHECKING:
    from interleave_thinker.train.data.examples import SFTExample

FORMAT_VERSION = "4"
"""Bump when data, dimensions, training or the base tiny models (``tiny.models.TINY_PRESET_VERSION``) change,
so stale caches are rebuilt."""
TEXT_HIDDEN = 64
TEXT_LAYERS = 3
TEXT_HEADS = 4
TEXT_KV_HEADS = 2
TEXT_INTERMEDIATE = 192
PLANNER_STEPS = 200
CRITIC_STEPS = 160
JUDGE_STEPS = 120
ADAPT_STEPS = 30
"""Steps that carry a shipped model (trained on the built-in templates) over to another template set: the
answer formats are the same, only the wording around them differs, so a short fine-tune suffices."""
JUDGE_SEED = 4
"""After ``tiny.models``'s planner, critic and generator seeds."""
JUDGE_DATA_VERSION = "1"
"""Bump when the judge's synthetic data or steps change: part of the judge's cache key only."""
ROLES = ("planner", "critic", "judge")
SEEDS = {"planner": PLANNER_SEED, "critic": CRITIC_SEED, "judge": JUDGE_SEED}
STEPS = {"planner": PLANNER_STEPS, "critic": CRITIC_STEPS, "judge": JUDGE_STEPS}
SHIPPED_ROLES = ("planner", "critic", "judge")
"""Shipped for the built-in templates (``tiny.shipped``): what the tiny preset's first run needs."""
ROLE_TEMPLATES = {
    "planner": ("planner_narrative", "critic"),
    "critic": ("planner_narrative", "critic"),
    "judge": ("judge_context", "judge_edit_rule", "judge_edit_sc", "judge_pq"),
}
"""The templates each role's training data is filled with: the cache key of its folder."""
BATCH = 4
LEARNING_RATE = 1e-2
TRAIN_THREADS = 2
"""Intra-op threads while training: a reduction split over another number of threads sums in another order."""
INPUTS_FILE = "training_inputs.json"
"""Written into a build's model folder (never shipped): :func:`training_inputs` of what it was trained from."""
MAX_NEW_TOKENS = 256
"""Enough for a four-step compact plan; use it as ``agents.max_new_tokens`` with these models."""


@dataclass(frozen=True)
class FormatTrainedPaths:
    """The two checkpoint folders (each loads with ``transformers:<folder>``) and the template set they learned."""

    planner: Path
    critic: Path
    templates_kind: str


def build_base(dest: Path, source: Path, *, seed: int) -> Path:
    """A wider, deeper random Qwen3-VL with the tiny preset's processor (copied from ``source``)."""
    from transformers import AutoConfig, AutoProcessor, GenerationConfig, Qwen3VLForConditionalGeneration

    config = AutoConfig.from_pretrained(source)
    text = config.text_config
    text.hidden_size, text.num_hidden_layers = TEXT_HIDDEN, TEXT_LAYERS
    text.num_attention_heads, text.num_key_value_heads = TEXT_HEADS, TEXT_KV_HEADS
    text.intermediate_size = TEXT_INTERMEDIATE
    config.vision_config.out_hidden_size = TEXT_HIDDEN
    with seeded(seed):
        model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig.from_pretrained(source)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    AutoProcessor.from_pretrained(source).save_pretrained(dest)
    return dest


def _train(dest: Path, base: Path, data: Path, steps: int, seed: int) -> None:
    from interleave_thinker.train.sft.trainer import run_sft

    config = SFTRunConfig(
        role=None,
        output_dir=dest,
        model=ModelSection(name_or_path=str(base), dtype="float32", image_max_pixels=None),
        data=DataSection(train=[data], check_replies=True),
        training=TrainingSection(
            learning_rate=LEARNING_RATE,
            max_steps=steps,
            warmup_ratio=0.05,
            per_device_train_batch_size=BATCH,
            max_length=None,
            bf16=False,
            gradient_checkpointing=False,
            save_steps=10 * steps,
            logging_steps=10,
            seed=seed,
            report_to="none",
            use_cpu=True,
        ),
    )
    run_sft(config, callbacks=[progress_callback()])
    for checkpoint in dest.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)


@dataclass(frozen=True)
class BuildJob:
    """What one format-trained build makes: :func:`_build_one` writes it as JSON into the build's folder,
    where its child process reads it back."""

    role: str
    templates: TemplateSet
    source: Path
    """The tiny preset's checkpoint whose processor and generation config the model takes."""
    steps: int | None = None
    """Overrides the role's default (tests; adapted builds)."""
    start: Path | None = None
    """Fine-tune this model instead of a fresh random base."""
    inputs_only: bool = False
    """Make the base and the data and write their :func:`training_inputs` into the build's folder, but
    train nothing: what the reproducibility test checks for the roles it does not rebuild."""

    def to_json(self) -> str:
        import dataclasses

        fields = dataclasses.asdict(self)  # the template set too, as {kind, origin, texts}
        fields.update(source=str(self.source), start=str(self.start) if self.start else None)
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> BuildJob:
        spec = json.loads(text)
        start = Path(spec["start"]) if spec["start"] else None
        templates = TemplateSet(**spec["templates"])
        return cls(spec["role"], templates, Path(spec["source"]), spec["steps"], start, spec["inputs_only"])


def _build_one(tmp: Path, job: BuildJob) -> None:
    """Build into ``tmp/model`` in a child process with pinned numerics (``tiny.models.run_pinned``), quietly."""
    import logging

    if current_reporter() is None:  # a display shows the build's own progress instead
        logging.getLogger(__name__).warning(
            "Building the format-trained tiny %s (once, a few minutes on CPU; cached after).", job.role
        )
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "job.json"
    path.write_text(job.to_json(), encoding="utf-8")
    run_pinned(
        ["-m", "interleave_thinker.tiny.format_trained", str(path)], f"the format-trained tiny {job.role}"
    )


def _build_from_job(path: Path) -> None:
    """The child process's side of :func:`_build_one`: the job file lies in the build's folder."""
    import warnings

    warnings.simplefilter("ignore")
    build_format_trained(path.parent, BuildJob.from_json(path.read_text(encoding="utf-8")))


def build_format_trained(tmp: Path, job: BuildJob) -> Path:
    """Build one format-trained model into ``tmp/model``, from a fresh random base or fine-tuned from
    ``job.start``.

    Deterministic given the seeds: data, initial weights and training order are seeded, the training
    runs on a fixed thread count with torch's deterministic algorithms; the remaining source of
    difference between machines (CPU kernels) is pinned by the environment (see docs/testing.md).
    """
    from interleave_thinker.train.data.trl_format import sft_dataset
    from interleave_thinker.train.synthetic import critic_examples, judge_examples, planner_examples

    role, templates = job.role, job.templates
    seed = SEEDS[role]
    work = tmp / "work"
    base = job.start or build_base(work / "base", job.source, seed=seed)
    if role == "planner":
        examples = planner_examples(templates, PLANNER_STEPS * BATCH // 2, seed=seed)
    elif role == "critic":
        examples = critic_examples(templates, CRITIC_STEPS * BATCH // 2, work / "images", seed=seed)
    else:
        examples = judge_examples(templates, JUDGE_STEPS * BATCH // 2, work / "images", seed=seed)
    inputs = json.dumps(training_inputs(base, examples), indent=1, sort_keys=True) + "\n"
    if job.inputs_only:
        shutil.rmtree(work)
        (tmp / INPUTS_FILE).write_text(inputs, encoding="utf-8")
        return tmp / INPUTS_FILE
    data = work / "data"
    sft_dataset(examples).save_to_disk(str(data))
    with deterministic_torch(TRAIN_THREADS):
        _train(tmp / "model", base, data, job.steps or STEPS[role], seed)
    shutil.rmtree(work)
    (tmp / "model" / INPUTS_FILE).write_text(inputs, encoding="utf-8")
    return tmp / "model"


def training_inputs(base: Path, examples: Sequence[SFTExample]) -> dict[str, str]:
    """SHA-256 digests of what a build trains from: the base model's files (weights, config, processor) and
    every example's turns and image pixels.

    Why: the same inputs, recipe (steps, seed, training settings) and training code make the same bytes. So
    the reproducibility test rebuilds one role in full, which shows the training code makes the shipped
    bytes, and checks only these inputs for the others: the same proof in a fifth of the time
    (docs/testing.md)."""
    from PIL import Image

    weights = {str(name): file_digest(base / name) for name in model_files(base)}
    data = hashlib.sha256()
    for example in examples:
        data.update(json.dumps([[t.role, t.content] for t in example.messages]).encode("utf-8"))
        for path in example.images:
            with Image.open(path) as image:
                data.update(json.dumps([image.mode, image.size]).encode("utf-8"))
                data.update(image.tobytes())
    return {"base": recipe_digest(weights), "data": data.hexdigest()}


def ensure_format_trained_tiny(
    root: Path | None = None, *, templates: TemplateSet | None = None
) -> FormatTrainedPaths:
    """The format-trained tiny planner and critic for ``templates`` (default: ``TemplateStore().load()``).

    Cached under ``<tiny dir>/format-v<version>-<template digest>/`` and reused when complete; built
    under a file lock in a temporary folder and renamed in when done, so a crash never leaves a
    half-trained model behind.
    """
    templates = templates or TemplateStore().load()
    return FormatTrainedPaths(
        planner=ensure_format_trained("planner", root, templates=templates),
        critic=ensure_format_trained("critic", root, templates=templates),
        templates_kind=templates.kind,
    )


def template_digest(role: str, templates: TemplateSet) -> str:
    """The cache key of a role's folder: the templates its data is filled with (and the judge's data version).
    A set other than the built-in one is adapted from the built-in model (:func:`ensure_format_trained`),
    so its key names that start too."""
    from interleave_thinker.core.pinned_texts import sha256_text

    digest, builtin = _texts_digest(role, templates), _builtin_digest(role)
    return digest if digest == builtin else sha256_text(f"adapted-{ADAPT_STEPS}-from-{builtin}-{digest}")[:12]


def _texts_digest(role: str, templates: TemplateSet) -> str:
    from interleave_thinker.core.pinned_texts import sha256_text

    salt = f"judge-v{JUDGE_DATA_VERSION}" if role == "judge" else ""  # planner/critic keys unchanged
    return sha256_text(salt + "".join(templates.get(n) for n in ROLE_TEMPLATES[role]))[:12]


def _builtin_digest(role: str) -> str:
    from interleave_thinker.core.prompt_store import builtin_templates

    return _texts_digest(role, builtin_templates())


def format_recipe(role: str, digest: str) -> dict[str, object]:
    """What a format-trained model's bytes depend on: a shipped copy is used only when this matches."""
    return {
        "model": f"format/{role}",
        "version": FORMAT_VERSION,
        "base_version": TINY_PRESET_VERSION,
        "templates": digest,
        "seed": SEEDS[role],
        "steps": STEPS[role],
        "shape": [TEXT_HIDDEN, TEXT_LAYERS, TEXT_HEADS, TEXT_KV_HEADS, TEXT_INTERMEDIATE],
        "training": [BATCH, LEARNING_RATE, TRAIN_THREADS],
        "numerics": {
            key: PINNED_NUMERICS[key] for key in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
        },
        "libraries": library_versions("torch", "transformers", "trl", "accelerate", "datasets", "tokenizers"),
    }


def format_folder(digest: str) -> str:
    """The folder of the format-trained models of one template digest, in a cache and in the artefacts
    (an artefact's key is ``<folder>/<role>``)."""
    return f"format-v{FORMAT_VERSION}-{digest}"


def ensure_format_trained(
    role: str, root: Path | None = None, *, templates: TemplateSet | None = None
) -> Path:
    """One format-trained tiny model (``planner``, ``critic`` or ``judge``), made alone when only one is
    needed: copied from the shipped artefact when its recipe matches (``tiny.shipped``), else trained
    (for another template set than the built-in one, adapted from the built-in model: :func:`_start`)."""
    if role not in ROLES:
        raise ValueError(f"role must be planner, critic or judge, not {role!r}")
    templates = templates or TemplateStore().load()
    digest = template_digest(role, templates)
    root = Path(root) if root is not None else default_tiny_dir()
    folder = root / format_folder(digest)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / role
    with file_lock(folder / ".lock"):
        if not (final / COMPLETE_MARKER).is_file():
            shutil.rmtree(final, ignore_errors=True)
            tmp = folder / f".{role}.partial"
            shutil.rmtree(tmp, ignore_errors=True)
            if not install_shipped(f"{folder.name}/{role}", format_recipe(role, digest), tmp / "model"):
                source = ensure_tiny_model("planner", root)
                _build_one(tmp, BuildJob(role, templates, source, *_start(role, root, digest)))
            (tmp / "model" / COMPLETE_MARKER).write_text(FORMAT_VERSION + "\n", encoding="utf-8")
            (tmp / "model").rename(final)
            shutil.rmtree(tmp)
    return final


def _start(role: str, root: Path, digest: str) -> tuple[int | None, Path | None]:
    """(steps, start model) of a build: from scratch for the built-in templates; for any other set, a short
    fine-tune of the built-in model (shipped, so no wait), minutes sooner than training from scratch."""
    from interleave_thinker.core.prompt_store import builtin_templates

    if digest == _builtin_digest(role):
        return None, None
    return ADAPT_STEPS, ensure_format_trained(role, root, templates=builtin_templates())


if __name__ == "__main__":
    import sys

    # The child process of _build_one (or tiny.rebuild.shipped_inputs): python -m ...format_trained JOB [JOB ...]
    for job_path in sys.argv[1:]:
        _build_from_job(Path(job_path))
