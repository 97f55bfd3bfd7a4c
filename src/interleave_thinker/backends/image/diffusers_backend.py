"""Local image backend on diffusers: FLUX.2-klein (t2i and edit) and any pipeline taking ``prompt`` and ``image``."""

from __future__ import annotations

import inspect
import threading
from typing import Any

from PIL import Image

from interleave_thinker.backends._loading import not_found, pick_device, pick_dtype, resolve_checkpoint
from interleave_thinker.backends.protocols import ImageBatchMixin
from interleave_thinker.core.errors import BackendError

# Per-model defaults the authors used (UPSTREAM "/edit" knobs): steps, guidance, and which call
# argument carries the guidance. Matched by substring of the lower-cased checkpoint reference.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "flux.2-klein": {"steps": 4, "guidance": 1.0, "guidance_arg": "guidance_scale"},
    "qwen-image-edit": {"steps": 50, "guidance": 5.0, "guidance_arg": "true_cfg_scale"},
    "omnigen2": {"steps": 50, "guidance": 5.0, "guidance_arg": "text_guidance_scale"},
    "longcat": {"steps": 50, "guidance": 4.5, "guidance_arg": "guidance_scale"},
}
FALLBACK_DEFAULTS: dict[str, Any] = {"steps": 28, "guidance": 3.5, "guidance_arg": "guidance_scale"}


def model_defaults(ref: str, pipeline_class: str = "") -> dict[str, Any]:
    key = (
        f"{ref} {pipeline_class}".lower()
        .replace("flux2klein", "flux.2-klein")
        .replace("qwenimageedit", "qwen-image-edit")
    )
    return next((v for k, v in MODEL_DEFAULTS.items() if k in key), FALLBACK_DEFAULTS)


class DiffusersImageBackend(ImageBatchMixin):
    def __init__(self, checkpoint: str, *, device: str | None = None, dtype: str = "auto") -> None:
        self.name = f"diffusers:{checkpoint}"
        self.checkpoint = resolve_checkpoint(checkpoint)
        self.device = pick_device(None if device == "auto" else device)
        self.pipe = self._load(dtype)
        # A diffusers pipeline keeps per-call state (the scheduler's timesteps and step index), so two
        # threads inside one call corrupt each other's images; calls on one device gain nothing anyway.
        self._lock = threading.Lock()
        self.parameters = set(inspect.signature(self.pipe.__call__).parameters)
        self.defaults = model_defaults(self.checkpoint, type(self.pipe).__name__)

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

    def generate(
        self,
        prompt: str,
        *,
        image: Image.Image | None = None,
        width: int = 1024,
        height: int = 1024,
        seed: int = 0,
        steps: int | None = None,
        guidance: float | None = None,
    ) -> Image.Image:
        import torch

        kwargs: dict[str, Any] = {
            "prompt": prompt,
            "width": width,
            "height": height,
            "num_inference_steps": steps if steps is not None else self.defaults["steps"],
            "generator": torch.Generator(device="cpu").manual_seed(seed),
        }
        guidance_arg = self.defaults["guidance_arg"]
        if guidance_arg in self.parameters:
            kwargs[guidance_arg] = guidance if guidance is not None else self.defaults["guidance"]
        if image is not None:
            if "image" not in self.parameters:
                raise BackendError(
                    f"{self.name}: {type(self.pipe).__name__} cannot edit images (no 'image' input)."
                )
            kwargs["image"] = image.convert("RGB")
        try:
            with self._lock, torch.inference_mode():
                output = self.pipe(**kwargs)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"{self.name}: generation failed: {exc}") from exc
        result = output.images[0]
        if not isinstance(result, Image.Image):
            raise BackendError(
                f"{self.name}: the pipeline returned {type(result).__name__}, not a PIL image."
            )
        return result

    def generate_batch(self, requests: list[dict[str, Any]]) -> list[Image.Image]:
        """Text-to-image requests with equal size, steps and guidance run as one pipeline call; the rest
        (edits, whose image list means multi-reference in FLUX.2, and mixed settings) run one by one."""
        import torch

        results: list[Image.Image | None] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, request in enumerate(requests):
            if request.get("image") is None:
                key = (
                    request.get("width", 1024),
                    request.get("height", 1024),
                    request.get("steps"),
                    request.get("guidance"),
                )
                groups.setdefault(key, []).append(index)
            else:
                results[index] = self.generate(**request)
        for (width, height, steps, guidance), indices in groups.items():
            if len(indices) == 1:
                results[indices[0]] = self.generate(**requests[indices[0]])
                continue
            kwargs: dict[str, Any] = {
                "prompt": [requests[i]["prompt"] for i in indices],
                "width": width,
                "height": height,
                "num_inference_steps": steps if steps is not None else self.defaults["steps"],
                "generator": [
                    torch.Generator(device="cpu").manual_seed(requests[i].get("seed", 0)) for i in indices
                ],
            }
            if self.defaults["guidance_arg"] in self.parameters:
                kwargs[self.defaults["guidance_arg"]] = (
                    guidance if guidance is not None else self.defaults["guidance"]
                )
            try:
                with self._lock, torch.inference_mode():
                    output = self.pipe(**kwargs)
            except (RuntimeError, ValueError) as exc:
                raise BackendError(f"{self.name}: batched generation failed: {exc}") from exc
            for i, image in zip(indices, output.images, strict=True):
                results[i] = image
        return [r for r in results if r is not None]
