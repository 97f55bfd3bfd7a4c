"""Local image backend on diffusers: FLUX.2-klein (t2i and edit) and any pipeline taking ``prompt`` and ``image``.

Seeds: with ``seed_device="pipeline"`` (``model.seed_device``) a pipeline on a CUDA device draws its noise
from a ``torch.Generator`` on that device, as every release generator does (``UEval/ueval_klein.py:208,
219``; ``inference/server/apis/klein_api.py:137``), so the release's seed gives the release's images; on
any other device, or with ``"cpu"``, from a CPU generator (the same noise on every device).
:attr:`DiffusersImageBackend.generator_device` says which, and the trace records it.

References (``ImageRequest.references``) go to FLUX.2 pipelines in their ``image`` list after the edited
image: ``Flux2KleinPipeline.__call__(image=[edited, ref1, ...])`` encodes each as a condition image (the
installed diffusers' ``pipeline_flux2_klein.py``, "4. process images"). Other pipelines take none.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from PIL import Image

from interleave_thinker.backends._loading import not_found, pick_device, pick_dtype, resolve_checkpoint
from interleave_thinker.backends.model_defaults import model_defaults
from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest
from interleave_thinker.backends.references import check_request, model_reference_cap, wire_images
from interleave_thinker.core.errors import BackendError, ConfigError, InputError

SEED_DEVICES = ("pipeline", "cpu")


def seeded_on(device: str, seed_device: str) -> str:
    """The device of the seeded ``torch.Generator``: ``device`` when it is CUDA and ``seed_device`` is
    ``pipeline`` (the release's way), else ``cpu``."""
    if seed_device not in SEED_DEVICES:
        raise ConfigError(f"model.seed_device {seed_device!r}: choose one of {', '.join(SEED_DEVICES)}.")
    return device if seed_device == "pipeline" and device.startswith("cuda") else "cpu"


def seeded_generator(seed: int, device: str) -> Any:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``: the noise of one generation."""
    import torch

    return torch.Generator(device=device).manual_seed(seed)


class DiffusersImageBackend(ImageBatchMixin):
    def __init__(
        self,
        checkpoint: str,
        *,
        device: str | None = None,
        dtype: str = "auto",
        seed_device: str = "pipeline",
    ) -> None:
        self.name = f"diffusers:{checkpoint}"
        self.checkpoint = resolve_checkpoint(checkpoint)
        self.device = pick_device(None if device == "auto" else device)
        self.generator_device = seeded_on(self.device, seed_device)
        self.pipe = self._load(dtype)
        # A diffusers pipeline keeps per-call state (the scheduler's timesteps and step index), so two
        # threads inside one call corrupt each other's images; calls on one device gain nothing anyway.
        self._lock = threading.Lock()
        self.parameters = set(inspect.signature(self.pipe.__call__).parameters)
        self.defaults = model_defaults(self.checkpoint, type(self.pipe).__name__)
        self.max_references = model_reference_cap(type(self.pipe).__name__) or 0  # FLUX.2 pipelines only

    def _load(self, dtype: str) -> Any:
        try:
            from diffusers import DiffusionPipeline
        except ImportError as exc:  # pragma: no cover - diffusers is a dependency
            raise BackendError("The diffusers backend needs `pip install diffusers`.") from exc
        torch_dtype = pick_dtype(dtype, self.device)
        if torch_dtype == "auto":
            import torch

            torch_dtype = torch.bfloat16
        try:
            pipe = DiffusionPipeline.from_pretrained(self.checkpoint, dtype=torch_dtype)
        except (OSError, ValueError) as exc:
            raise not_found(self.checkpoint, exc) from exc
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(self.device)

    def generate(self, request: ImageRequest) -> Image.Image:
        kwargs = self._call_kwargs(request.settings, [request])
        images = [image.convert("RGB") for image in wire_images(request)]
        if images:
            if "image" not in self.parameters:
                raise BackendError(
                    f"{self.name}: {type(self.pipe).__name__} cannot edit images (no 'image' input)."
                )
            check_request(self.name, self.max_references, request)
            self._check_inputs(images)
            kwargs["image"] = images if request.references else images[0]
        result = self._run(kwargs)[0]
        if not isinstance(result, Image.Image):
            raise BackendError(
                f"{self.name}: the pipeline returned {type(result).__name__}, not a PIL image."
            )
        return result

    def _check_inputs(self, images: list[Image.Image]) -> None:
        """:class:`InputError` for an input image the pipeline's own image processor refuses (FLUX.2:
        sides under 64 px, an aspect ratio over 8:1), before the pipeline runs: a bad request, not a
        failed generation (``serve generator`` answers it 400, not 500)."""
        check = getattr(getattr(self.pipe, "image_processor", None), "check_image_input", None)
        if not callable(check):
            return
        for index, image in enumerate(images):
            try:
                check(image)
            except ValueError as exc:
                which = "the input image" if index == 0 else f"reference image {index}"
                raise InputError(
                    f"{self.name}: {which} is refused by {type(self.pipe).__name__}: {exc}; resize it to fit."
                ) from None

    def generate_batch(self, requests: list[ImageRequest]) -> list[Image.Image]:
        """Text-to-image requests with equal size, steps and guidance run as one pipeline call; the rest
        (edits and references, whose image list means multi-reference in FLUX.2, and mixed settings) run
        one by one."""
        results: list[Image.Image | None] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, request in enumerate(requests):
            if request.image is None and not request.references:
                groups.setdefault(request.settings, []).append(index)
            else:
                results[index] = self.generate(request)
        for settings, indices in groups.items():
            if len(indices) == 1:
                results[indices[0]] = self.generate(requests[indices[0]])
                continue
            kwargs = self._call_kwargs(settings, [requests[i] for i in indices])
            for i, image in zip(indices, self._run(kwargs), strict=True):
                results[i] = image
        return [r for r in results if r is not None]

    def _call_kwargs(
        self, settings: tuple[int, int, int | None, float | None], requests: list[ImageRequest]
    ) -> dict[str, Any]:
        """The pipeline arguments of requests sharing ``settings``: one prompt and seeded generator each
        (on :attr:`generator_device`; a list when batched), the model's default steps and guidance where the
        call has none."""
        width, height, steps, guidance = settings
        prompts = [r.prompt for r in requests]
        generators = [seeded_generator(r.seed, self.generator_device) for r in requests]
        kwargs: dict[str, Any] = {
            "prompt": prompts if len(requests) > 1 else prompts[0],
            "width": width,
            "height": height,
            "num_inference_steps": steps if steps is not None else self.defaults.steps,
            "generator": generators if len(requests) > 1 else generators[0],
        }
        if self.defaults.guidance_arg in self.parameters:
            kwargs[self.defaults.guidance_arg] = guidance if guidance is not None else self.defaults.guidance
        return kwargs

    def _run(self, kwargs: dict[str, Any]) -> list[Any]:
        """One pipeline call under the lock; its failures become :class:`BackendError`."""
        import torch

        try:
            with self._lock, torch.inference_mode():
                return list(self.pipe(**kwargs).images)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"{self.name}: generation failed: {exc}") from exc
