"""The library entry point: ``Pipeline.from_preset("tiny")("How to draw a cat?")``."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from interleave_thinker.agents.critic import Critic
from interleave_thinker.agents.planner import Planner
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.backends.specs import (
    BackendOptions,
    check_specs,
    load_image_backend,
    load_vlm_backend,
)
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.images import open_rgb
from interleave_thinker.core.messages import count_image_markers
from interleave_thinker.core.prompt_store import TemplateSet, TemplateStore
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Request, StepRecord, Trace
from interleave_thinker.runtime.documents import DOCUMENT_MD, INDEX_HTML, write_documents
from interleave_thinker.runtime.failures import failure_reason, note_backend_errors
from interleave_thinker.runtime.loop import StepLoop
from interleave_thinker.runtime.observer import Observer
from interleave_thinker.runtime.recorder import IMAGES_DIR, TRACE_FILE, RunRecorder

logger = logging.getLogger(__name__)


@dataclass
class StepOutput:
    """One step of the result: its text and its accepted image (None for text answers)."""

    text: str | None
    image: Image.Image | None
    image_file: str | None


@dataclass
class Result:
    trace: Trace
    images: dict[str, Image.Image] = field(default_factory=dict)
    notice: str | None = None

    @property
    def ok(self) -> bool:
        return self.trace.status == "succeeded"

    @property
    def steps(self) -> list[StepOutput]:
        return [_step_output(s, self.images) for s in self.trace.steps]

    def save(self, out_dir: str | Path) -> Path:
        """Write ``trace.json``, ``images/``, ``document.md`` and ``index.html`` into ``out_dir``."""
        out = Path(out_dir)
        recorder = RunRecorder(self.trace)
        recorder.images = self.images
        recorder.save(out)
        write_documents(self.trace, out, self.notice)
        return out


def _step_output(step: StepRecord, images: dict[str, Image.Image]) -> StepOutput:
    image = images.get(step.accepted_image) if step.accepted_image else None
    return StepOutput(text=step.text, image=image, image_file=step.accepted_image)


def load_input_images(paths: Sequence[str | Path]) -> list[Image.Image]:
    """Open every input image up front, so a bad path fails before anything is generated or written."""
    images = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"Input image {p} does not exist.")
        try:
            with Image.open(p) as handle:
                images.append(handle.convert("RGB"))
        except (UnidentifiedImageError, OSError) as exc:
            raise InputError(f"Input image {p} cannot be read as an image ({exc}).") from None
    return images


def normalize_request_text(text: str, n_images: int) -> tuple[str, list[str]]:
    """Check ``<image>`` markers against the images; with none at all, place the images first."""
    if not text.strip():
        raise InputError("The request text is empty; say what to generate.")
    markers = count_image_markers(text)
    if n_images and markers == 0:
        return "<image>" * n_images + text, [
            f"No <image> markers in the request; the {n_images} image(s) were placed before the text."
        ]
    if markers != n_images:
        raise InputError(
            f"The request has {markers} <image> marker(s) but {n_images} image(s) were given (--image); "
            "give one image per marker, in order."
        )
    return text, []


def resume_recorder(out_dir: Path, request: Request) -> RunRecorder | None:
    """A recorder holding the trace and images already in ``out_dir``, or None when there is none."""
    path = out_dir / TRACE_FILE
    for leftover in out_dir.rglob(".*.tmp") if out_dir.is_dir() else []:
        leftover.unlink()  # a write interrupted by a crash; the rename never happened
    if not path.is_file():
        return None
    try:
        trace = Trace.model_validate_json(path.read_bytes())
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InputError(
            f"{path} cannot be read ({failure_reason(exc)[:160]}); remove it to start the request over."
        ) from None
    if trace.request.text != request.text or trace.request.images != request.images:
        raise InputError(f"{path} holds a different request; use another output folder or remove it.")
    recorder = RunRecorder(trace, out_dir)
    keep = set(trace.input_images) | {
        s.accepted_image for s in trace.steps if s.complete and s.accepted_image
    }
    keep |= {a.image_file for s in trace.steps if s.complete for a in s.attempts if a.image_file}
    for name in keep:
        recorder.images[name] = open_rgb(str(out_dir / IMAGES_DIR / name))
    for stale in (out_dir / IMAGES_DIR).glob("*.png") if (out_dir / IMAGES_DIR).is_dir() else []:
        if stale.name not in keep:
            stale.unlink()  # an attempt of the step that was interrupted: it runs again
    return recorder


class Pipeline:
    """Planner, critic and generator wired to the step loop, with one config."""

    def __init__(
        self,
        *,
        planner: VLMBackend,
        critic: VLMBackend,
        generator: ImageBackend,
        config: PipelineConfig,
        templates: TemplateSet,
    ) -> None:
        self.config = config
        self.templates = templates
        self.planner_backend, self.critic_backend, self.generator = planner, critic, generator
        agents = config.agents
        retry = RetryPolicy(agents.max_parse_attempts, agents.temperature, agents.retry_temperature)
        self.planner = Planner(planner, templates, retry=retry, max_new_tokens=agents.max_new_tokens)
        self.critic = Critic(critic, templates, retry=retry, max_new_tokens=agents.max_new_tokens)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Pipeline:
        return cls.from_config(PipelineConfig.resolve(preset=name, overrides=overrides))

    @classmethod
    def from_config(cls, config: PipelineConfig) -> Pipeline:
        prompts = config.prompts
        store = TemplateStore(
            folder=prompts.folder,
            cache_dir=prompts.cache_dir,
            base_url=prompts.base_url,
            download=prompts.download,
            verify=prompts.verify,
            builtin_fallback=prompts.builtin_fallback,
        )
        check_specs(config)  # every spec's kind, before a model (or a tiny-model build) is loaded
        templates = store.load()
        options = BackendOptions.from_config(config)
        planner = load_vlm_backend(config.planner, options, role="planner")
        critic = (
            planner
            if config.critic == config.planner
            else load_vlm_backend(config.critic, options, role="critic")
        )
        generator = load_image_backend(config.generator, options)
        return cls(planner=planner, critic=critic, generator=generator, config=config, templates=templates)

    def __call__(
        self,
        prompt: str,
        images: Sequence[str | Path] | None = None,
        *,
        out_dir: str | Path | None = None,
        observer: Observer | None = None,
        request_id: str | None = None,
        task: str | None = None,
        resume: bool = False,
    ) -> Result:
        """Run one request; with ``out_dir`` every image and the trace are written as they are made.

        With ``resume=True`` and a trace of the same request in ``out_dir``, a finished request is
        returned as it is and an unfinished one continues after its last complete step.
        """
        # 1. Check inputs before anything is generated or written.
        paths = [str(p) for p in images or []]
        input_images = load_input_images(paths)
        text, warnings = normalize_request_text(clean_text(prompt), len(input_images))

        # 2. Set up the trace and the recorder (or pick up a trace on disk when resuming).
        out = Path(out_dir) if out_dir is not None else None
        request = Request(text=text, images=paths, id=request_id, task=clean_text(task) if task else task)
        recorder = resume_recorder(out, request) if resume and out is not None else None
        if recorder is not None and recorder.trace.status in ("succeeded", "failed"):
            folder = recorder.out_dir
            if folder is not None and not all((folder / n).is_file() for n in (INDEX_HTML, DOCUMENT_MD)):
                write_documents(recorder.trace, folder, self.config.notice)  # a kill came before them
            return Result(trace=recorder.trace, images=recorder.images, notice=self.config.notice)
        if recorder is None:
            recorder = self._new_recorder(request, warnings, input_images, out)
        trace = recorder.trace

        # 3. Run the loop; the trace and documents are written even when planning fails.
        loop = StepLoop(
            planner=self.planner,
            critic=self.critic,
            generator=self.generator,
            loop=self.config.loop,
            generation=self.config.generation,
            observer=observer,
        )
        start = time.perf_counter()
        try:
            loop.run(recorder, input_images, trace.input_images)
        finally:
            trace.duration_s = round(trace.duration_s + time.perf_counter() - start, 3)
            note_backend_errors(trace)
            recorder.checkpoint()
            if recorder.out_dir is not None:
                write_documents(trace, recorder.out_dir, self.config.notice)
        return Result(trace=trace, images=recorder.images, notice=self.config.notice)

    def _new_recorder(
        self, request: Request, warnings: list[str], input_images: list[Image.Image], out: Path | None
    ) -> RunRecorder:
        """A fresh trace (backends, settings, templates) with copies of the input images."""
        trace = Trace(
            request=request,
            backends={
                "planner": self.config.planner,
                "critic": self.config.critic,
                "generator": self.config.generator,
            },
            settings={
                "loop": self.config.loop.model_dump(),
                "generation": self.config.generation.model_dump(),
            },
            templates=self.templates.info(),
            warnings=warnings + self._template_warnings(),
        )
        recorder = RunRecorder(trace, out)
        trace.input_images = [
            recorder.add_image(f"input_{i}.png", im) for i, im in enumerate(input_images, start=1)
        ]
        return recorder

    def close(self) -> None:
        """Release the backends' connections (served backends hold HTTP clients)."""
        seen: set[int] = set()
        for backend in (self.planner_backend, self.critic_backend, self.generator):
            close = getattr(backend, "close", None)
            if callable(close) and id(backend) not in seen:
                seen.add(id(backend))
                close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _template_warnings(self) -> list[str]:
        if self.templates.kind == "released":
            return []
        specs = (self.config.planner, self.config.critic)
        if any("InterleaveThinker/" in spec for spec in specs):
            message = (
                f"Released InterleaveThinker checkpoints are driven with {self.templates.kind} templates; "
                "they were trained on the released ones. Run `interleave-thinker prompts download`."
            )
            logger.warning(message)
            return [message]
        return []
