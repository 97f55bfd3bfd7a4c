"""The library entry point: ``Pipeline.from_preset("tiny")("How to draw a cat?")``."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Unpack

from PIL import Image

from interleave_thinker.agents.critic import Critic
from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.messages import count_image_markers
from interleave_thinker.agents.planner import Planner
from interleave_thinker.agents.ranking import Ranker
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.agents.sequence_review import SequenceReviewer
from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.backends.references import check_references
from interleave_thinker.backends.specs import (
    BackendOptions,
    check_specs,
    load_image_backend,
    load_vlm_backend,
)
from interleave_thinker.backends.wrapping import close_backend, generator_device, reference_cap
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Request, StepRecord, Trace
from interleave_thinker.runtime.call_overrides import (
    CallOverrides,
    call_settings,
    for_call,
    given_overrides,
    one_form,
    preset_config,
)
from interleave_thinker.runtime.documents import write_documents
from interleave_thinker.runtime.failures import note_backend_errors
from interleave_thinker.runtime.fallbacks import note_fallbacks
from interleave_thinker.runtime.input_images import InputImages, open_image_file, read_input_images
from interleave_thinker.runtime.loop import StepLoop
from interleave_thinker.runtime.observer import Observer
from interleave_thinker.runtime.recorder import RunRecorder
from interleave_thinker.runtime.resume import is_finished, restore_pages, resume_recorder
from interleave_thinker.runtime.used_backends import backend_description

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
    images: MutableMapping[str, Image.Image] = field(default_factory=dict)
    """Name -> image; a run with a folder reads each image from the PNG bytes it wrote (``RunRecorder``)."""
    notice: str | None = None

    @property
    def ok(self) -> bool:
        return self.trace.status == "succeeded"

    @property
    def steps(self) -> list[StepOutput]:
        """Each step as shown: its text and the image it shows (``Trace.shown_image``: a repair's)."""
        shown = (self.trace.shown_image(n) for n in range(1, len(self.trace.steps) + 1))
        return [_step_output(s, name, self.images) for s, name in zip(self.trace.steps, shown, strict=True)]

    def save(self, out_dir: str | Path) -> Path:
        """Write ``trace.json``, ``images/``, ``document.md`` and ``index.html`` into ``out_dir``."""
        out = Path(out_dir)
        recorder = RunRecorder(self.trace)
        recorder.images = self.images
        recorder.save(out)
        write_documents(self.trace, out, self.notice)
        return out


def _load_opt_in(
    config: PipelineConfig, generator: ImageBackend, options: BackendOptions, templates: TemplateSet
) -> tuple[Judge | None, VLMBackend | None]:
    """The backends of opt-in settings: the judge that scores every attempt for ``loop.select_best:
    judge`` and the sequence review's (``loop.repair_reviewer``, when it is not the critic's)."""
    if config.loop.repair_budget > 0 and reference_cap(generator) == 0:
        raise ConfigError(
            f"loop.repair_budget regenerates steps with reference images, which the generator "
            f"{config.generator} cannot take; set loop.repair_budget 0 or use a generator that takes them."
        )
    reviewer = config.loop.repair_reviewer
    review = None
    if config.loop.repair_budget > 0 and reviewer and reviewer != config.critic:
        review = load_vlm_backend(reviewer, options, role="critic")
    judge = None
    if config.loop.select_best == "judge" and config.judge:
        backend = load_vlm_backend(config.judge, options, role="critic")
        judge = Judge(backend, templates, max_new_tokens=config.agents.max_new_tokens)
    return judge, review


def _step_output(step: StepRecord, name: str | None, images: Mapping[str, Image.Image]) -> StepOutput:
    return StepOutput(text=step.text, image=images.get(name) if name else None, image_file=name)


def load_input_images(paths: Sequence[str | Path]) -> list[Image.Image]:
    """Open every input image up front, so a bad path fails before anything is generated or written."""
    return [open_image_file(path) for path in paths]


def normalize_request_text(
    text: str, n_images: int, *, images_from: str = "--image"
) -> tuple[str, list[str]]:
    """Check ``<image>`` markers against the images; with none at all, place the images first.
    ``images_from`` is how the message names where images are given (the demo's upload field)."""
    if not text.strip():
        raise InputError("The request text is empty; say what to generate.")
    markers = count_image_markers(text)
    if n_images and markers == 0:
        return "<image>" * n_images + text, [
            f"No <image> markers in the request; the {n_images} image(s) were placed before the text."
        ]
    if markers != n_images:
        raise InputError(
            f"The request has {markers} <image> marker(s) but {n_images} image(s) were given ({images_from}); "
            "give one image per marker, in order."
        )
    return text, []


class Pipeline:
    """Planner, critic and generator wired to the step loop, with one config: the composition root of
    the loop's agents (the ranker and the sequence reviewer are made here once, from the critic).

    ``judge``: every attempt is scored (SC/PQ) as it is made (`data generate`, ``loop.select_best:
    judge``). ``reviewer``: the sequence review's backend (``loop.repair_reviewer``; None: the critic's).
    The pipeline closes every backend it was given."""

    def __init__(
        self,
        *,
        planner: VLMBackend,
        critic: VLMBackend,
        generator: ImageBackend,
        config: PipelineConfig,
        templates: TemplateSet,
        judge: Judge | None = None,
        reviewer: VLMBackend | None = None,
    ) -> None:
        check_references(generator, config.loop.references)  # a generator that cannot: refused here
        self.config = config
        self.templates = templates
        self.planner_backend, self.critic_backend, self.generator = planner, critic, generator
        agents = config.agents
        first = None if agents.decoding == "checkpoint" else 0.0  # None: the model's own decoding
        retry = RetryPolicy(agents.max_parse_attempts, first, agents.retry_temperature)
        self.planner = Planner(planner, templates, retry=retry, max_new_tokens=agents.max_new_tokens)
        self.planner.many_images_max_pixels = agents.many_images_max_pixels
        self.critic = Critic(critic, templates, retry=retry, max_new_tokens=agents.max_new_tokens)
        self.judge, self.reviewer = judge, reviewer
        self.ranker = self.critic.sibling(Ranker)
        self.sequence_reviewer = self.critic.sibling(SequenceReviewer, reviewer)
        self.call_overrides: dict[str, Any] = {}
        """The per-call settings this copy runs with (``runtime/call_overrides.for_call``)."""

    @classmethod
    def from_preset(
        cls, name: str, *, device: str | None = None, dtype: str | None = None, **overrides: Any
    ) -> Pipeline:
        """The preset's pipeline; ``device``/``dtype`` set ``model.device``/``model.dtype``, and
        ``overrides`` are config sections (``loop={"max_attempts": 5}``), as in a YAML file."""
        return cls.from_config(preset_config(name, device=device, dtype=dtype, overrides=overrides))

    @classmethod
    def from_config(cls, config: PipelineConfig) -> Pipeline:
        store = config.prompts.store()
        check_specs(config)  # every spec's kind, before a model (or a tiny-model build) is loaded
        templates = store.load()
        if (
            store.fallback_reason is not None and config.preset != "tiny"
        ):  # the tiny agents learnt the built-in ones
            logger.warning(
                "Released prompt templates unavailable (%s); the agents get interleave-thinker's built-in "
                "templates. Run `interleave-thinker prompts download` or set prompts.folder.",
                store.fallback_reason,
            )
        options = BackendOptions.from_config(config)
        planner = load_vlm_backend(config.planner, options, role="planner")
        critic = (
            planner
            if config.critic == config.planner
            else load_vlm_backend(config.critic, options, role="critic")
        )
        generator = load_image_backend(config.generator, options)
        judge, reviewer = _load_opt_in(config, generator, options, templates)
        built = partial(cls, config=config, templates=templates, judge=judge, reviewer=reviewer)
        return built(planner=planner, critic=critic, generator=generator)

    def __call__(
        self,
        prompt: str,
        image: InputImages | None = None,
        *,
        out_dir: str | Path | None = None,
        observer: Observer | None = None,
        request_id: str | None = None,
        task: str | None = None,
        resume: bool = False,
        **settings: Unpack[CallOverrides],
    ) -> Result:
        """Run one request; with ``out_dir`` every image and the trace are written as they are made.

        ``image`` is file paths or PIL images (one, or a list in ``<image>`` order). ``seed``
        (``loop.seed_base``), ``num_inference_steps``, ``width``, ``height``, ``guidance_scale``
        (``generation.steps/width/height/guidance``) and ``max_attempts`` (``loop.max_attempts``)
        override the config for this call only, checked as the config is (a bad value raises
        ConfigError naming the argument) and recorded in the trace. The config's short names are
        accepted aliases: ``images=``, ``steps=``, ``guidance=``; both forms of one raise ConfigError.
        With ``resume=True`` and a trace of the same request in ``out_dir``, a finished request is
        returned as it is and an unfinished one continues after its last complete step.
        """
        image = one_form(image=image, images=settings.pop("images", None))
        overrides = given_overrides(**settings)
        pipe = for_call(self, overrides) if overrides else self  # this call only: a copy, merged config
        return pipe._run(prompt, image, out_dir, observer, request_id, task, resume)

    def _run(
        self,
        prompt: str,
        image: InputImages | None,
        out_dir: str | Path | None,
        observer: Observer | None,
        request_id: str | None,
        task: str | None,
        resume: bool,
    ) -> Result:
        """The run of one request with this pipeline's config (per-call values already merged in)."""
        # 1. Check inputs before anything is generated or written.
        request, input_images, warnings = self._check_inputs(prompt, image, request_id, task)
        # 2. Open the trace and its recorder, or pick up the run already in ``out_dir``.
        recorder = self._open(request, input_images, warnings, out_dir, resume=resume)
        if is_finished(recorder.trace):  # a resumed run that had finished is returned as it is
            self._write_pages(recorder, only_missing=True)
            return self._result(recorder)
        # 3. Run the loop; the trace and the pages are written even when planning fails.
        start = time.perf_counter()
        try:
            self._run_loop(recorder, input_images, observer)
        finally:
            self._close_trace(recorder, start)
            # 4. Write the pages.
            self._write_pages(recorder)
        return self._result(recorder)

    def _check_inputs(
        self, prompt: str, images: InputImages | None, request_id: str | None, task: str | None
    ) -> tuple[Request, list[Image.Image], list[str]]:
        """The request, its images (opened) and the warnings about it; bad input raises InputError."""
        names, input_images = read_input_images(images)
        text, warnings = normalize_request_text(clean_text(prompt), len(input_images))
        request = Request(text=text, images=names, id=request_id, task=clean_text(task) if task else task)
        return request, input_images, warnings

    def _open(
        self,
        request: Request,
        input_images: list[Image.Image],
        warnings: list[str],
        out_dir: str | Path | None,
        *,
        resume: bool,
    ) -> RunRecorder:
        """The recorder of the run already in ``out_dir`` (when resuming and there is one), else a new one."""
        out = Path(out_dir) if out_dir is not None else None
        recorder = resume_recorder(out, request) if resume and out is not None else None
        return recorder or self._new_recorder(request, warnings, input_images, out)

    def _run_loop(
        self, recorder: RunRecorder, input_images: list[Image.Image], observer: Observer | None
    ) -> None:
        loop = StepLoop(
            planner=self.planner,
            critic=self.critic,
            generator=self.generator,
            loop=self.config.loop,
            generation=self.config.generation,
            observer=observer or Observer(),
            judge=self.judge,
            ranker=self.ranker,
            sequence_reviewer=self.sequence_reviewer,
        )
        loop.run(recorder, input_images, recorder.trace.input_images)

    def _close_trace(self, recorder: RunRecorder, start: float) -> None:
        """Add this run's time (a resumed run adds to the earlier ones'), count backend errors and fallbacks, write
        the trace."""
        trace = recorder.trace
        trace.duration_s = round(trace.duration_s + time.perf_counter() - start, 3)
        note_backend_errors(trace)
        note_fallbacks(trace)
        recorder.checkpoint()

    def _write_pages(self, recorder: RunRecorder, *, only_missing: bool = False) -> None:
        """``document.md`` and ``index.html`` from the trace (``only_missing``: when a kill came before them)."""
        if recorder.out_dir is None:
            return
        if only_missing:
            restore_pages(recorder.out_dir, self.config.notice, recorder.trace)
        else:
            write_documents(recorder.trace, recorder.out_dir, self.config.notice)

    def _result(self, recorder: RunRecorder) -> Result:
        return Result(trace=recorder.trace, images=recorder.images, notice=self.config.notice)

    def _new_recorder(
        self, request: Request, warnings: list[str], input_images: list[Image.Image], out: Path | None
    ) -> RunRecorder:
        """A fresh trace (backends, settings, templates) with copies of the input images."""
        trace = Trace(
            request=request,
            backends=self._used_backends(),
            settings={
                "loop": self.config.loop.trace_settings(),
                "generation": self.config.generation.model_dump(),
                **call_settings(self.call_overrides),
                **self._seed_device(),
            },
            templates=self.templates.info(),
            warnings=warnings + self._template_warnings(),
        )
        recorder = RunRecorder(trace, out)
        trace.input_images = [
            recorder.add_image(f"input_{i}.png", im) for i, im in enumerate(input_images, start=1)
        ]
        return recorder

    def _seed_device(self) -> dict[str, str]:
        """``generator_seed_device``: where a local generator seeds (``cpu``, ``cuda:0``; model.seed_device);
        nothing for a served generator (its server seeds)."""
        device = generator_device(self.generator)
        return {} if device is None else {"generator_seed_device": device}

    def _used_backends(self) -> dict[str, str]:
        """Each role's backend as it ran (its spec, name or class; ``runtime/used_backends``)."""
        used = {
            "planner": backend_description(self.planner_backend),
            "critic": backend_description(self.critic_backend),
            "generator": backend_description(self.generator),
        }
        if self.judge is not None:
            used["judge"] = backend_description(self.judge.backend)
        return used

    def close(self) -> None:
        """Release the backends' connections (served backends hold HTTP clients)."""
        seen: set[int] = set()
        judge = self.judge.backend if self.judge is not None else None
        for backend in (self.planner_backend, self.critic_backend, self.generator, judge, self.reviewer):
            if backend is not None and id(backend) not in seen:
                seen.add(id(backend))
                close_backend(backend)

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
