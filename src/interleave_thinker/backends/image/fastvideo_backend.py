"""Image backend on FastVideo's ``VideoGenerator`` (GPU only), e.g. ``fastvideo:black-forest-labs/FLUX.2-klein-4B``.

Install with ``pip install 'interleave-thinker[fastvideo]'`` (FastVideo 0.2.0 or newer); FastVideo needs
an NVIDIA GPU with CUDA. Options follow the model after ``#``, joined by ``&``, values percent-decoded:
``fastvideo:MODEL#num_gpus=2&offload=text_encoder,vae&negative_prompt=blurry&true_cfg_scale=4``
(see :mod:`.fastvideo_options`).

FastVideo surface used, as read in ``hao-ai-lab/FastVideo`` (0.2.0):

- ``VideoGenerator.from_pretrained(model_path, num_gpus=N, dit_cpu_offload=..., ...)``: ``num_gpus`` and
  the five ``*_offload`` flags are among its "convenience" kwargs
  (``fastvideo/entrypoints/video_generator.py``); without ``offload`` we pass none and FastVideo's own
  defaults apply;
- the typed request: ``fastvideo.api.parse_config(GenerationRequest, raw)`` builds a
  ``GenerationRequest`` (``fastvideo/api/schema.py``: ``prompt``, ``negative_prompt``,
  ``inputs.image_path``, ``sampling.{num_frames, fps, height, width, seed, num_inference_steps,
  guidance_scale, true_cfg_scale}``, ``output.{output_path, save_video, return_frames}``) and records which
  fields we gave, so the fields we leave out keep the model's preset (a dataclass built directly would
  mark every schema default as set); ``generator.generate(request)`` returns a ``GenerationResult`` (or a
  list, whose first we take) with ``frames``, one ``H x W x 3`` ``uint8`` array per frame. The older
  ``generate_video(prompt, **kwargs)`` is deprecated (``DeprecationWarning``) and not used;
- one frame per image (``num_frames=1, fps=1``, as ``examples/inference/basic/basic_flux2_klein.py``); an
  edit passes the input image as ``inputs.image_path`` (a PNG we write), as the InterleaveThinker adapter
  of FastVideo's integration branch does (``fastvideo/workflow/interleave_thinker/generator.py`` on
  ``fix/interleave-thinker-review``);
- ``generator.shutdown()`` in :meth:`FastVideoImageBackend.close`.

``output_path`` points at a private scratch folder because FastVideo creates that folder even when it
saves nothing. Seeds are honoured. When ``steps``/``guidance`` are None we use the authors' settings for
known models (FLUX.2-klein: 4 steps, guidance 1.0, as in the diffusers backend), else FastVideo's own
preset for the model. The result is resized to the requested size if the pipeline returns another one
(it aligns sides to 16).
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import threading
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageOps

from interleave_thinker.backends.image.fastvideo_options import FastVideoOptions, parse_target
from interleave_thinker.backends.model_defaults import find_defaults
from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest
from interleave_thinker.backends.references import check_request
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

INSTALL_HINT = "pip install 'interleave-thinker[fastvideo]'"
__all__ = ["FastVideoImageBackend", "FastVideoOptions", "frame_to_image", "load_fastvideo", "parse_target"]


def load_fastvideo() -> tuple[Any, Any]:
    """``fastvideo.VideoGenerator`` and ``fastvideo.api``, imported only when this backend is used."""
    try:
        fastvideo = importlib.import_module("fastvideo")
        api = importlib.import_module("fastvideo.api")
    except ImportError as exc:
        raise BackendError(
            f"The fastvideo backend needs FastVideo; install it with {INSTALL_HINT} "
            "(it runs on NVIDIA GPUs with CUDA only)."
        ) from exc
    generator_class = fastvideo.VideoGenerator
    if not hasattr(api, "GenerationRequest") or not callable(getattr(generator_class, "generate", None)):
        raise BackendError(
            "The fastvideo backend needs FastVideo 0.2.0 or newer (the typed generate(GenerationRequest) API); "
            "upgrade with pip install -U fastvideo."
        )
    return generator_class, api


def frame_to_image(frame: Any) -> Image.Image:
    """One ``H x W x 3`` frame (uint8, or floats in [0, 1]) as an RGB image."""
    array = np.asarray(frame)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise BackendError(f"FastVideo returned a frame of shape {array.shape}; expected (height, width, 3).")
    if array.dtype != np.uint8:
        array = (np.clip(array.astype(np.float32), 0.0, 1.0) * 255).round().astype(np.uint8)
    return Image.fromarray(array).convert("RGB")


def _first_frame(result: Any) -> Any:
    """The first frame of a ``GenerationResult`` (or of the first of a list of them)."""
    if isinstance(result, list):
        result = result[0] if result else None
    frames = getattr(result, "frames", None)
    if frames is None or len(frames) == 0:
        raise BackendError("FastVideo returned no frames (expected GenerationResult.frames).")
    return frames[0]


class FastVideoImageBackend(ImageBatchMixin):
    """Text-to-image and edits with one-frame FastVideo generations; see the module doc for the surface."""

    max_references = 0
    """``GenerationRequest.inputs`` takes one image path: no reference images (``loop.references`` is
    refused at load time)."""

    def __init__(
        self,
        model: str,
        *,
        options: FastVideoOptions | None = None,
        load_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not model.strip():
            raise ConfigError(
                "fastvideo spec has no model; write fastvideo:MODEL, "
                "e.g. 'fastvideo:black-forest-labs/FLUX.2-klein-4B'."
            )
        self.model = model.strip()
        self.name = f"fastvideo:{self.model}"
        self.options = options or FastVideoOptions()
        self.defaults = find_defaults(self.model)  # None: keep FastVideo's preset
        generator_class, self._api = load_fastvideo()
        try:
            self.generator = generator_class.from_pretrained(
                self.model, **self.options.load_kwargs(), **(load_kwargs or {})
            )
        except (OSError, ValueError, RuntimeError, ImportError) as exc:
            raise BackendError(
                f"{self.name}: FastVideo could not load the model ({type(exc).__name__}: {exc}). Check the "
                "model id or path, that a CUDA GPU is visible, and that num_gpus fits the machine."
            ) from exc
        self._scratch = Path(tempfile.mkdtemp(prefix="interleave-thinker-fastvideo-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
        self._lock = threading.Lock()  # one generation at a time per loaded pipeline
        self._closed = False

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> FastVideoImageBackend:
        """``fastvideo:MODEL[#num_gpus=N&offload=PARTS&negative_prompt=TEXT&true_cfg_scale=X]``."""
        model, spec_options = parse_target(target)
        return cls(model, options=spec_options)

    def request_fields(self, request: ImageRequest, input_path: Path | None) -> dict[str, Any]:
        """The ``GenerationRequest`` as a nested mapping of exactly the fields we set."""
        width, height, steps, guidance = request.settings
        if steps is None and self.defaults is not None:
            steps = self.defaults.steps
        if guidance is None and self.defaults is not None:
            guidance = self.defaults.guidance
        sampling: dict[str, Any] = {
            "num_frames": 1,
            "fps": 1,
            "height": height,
            "width": width,
            "seed": request.seed,
        }
        if steps is not None:
            sampling["num_inference_steps"] = steps
        if guidance is not None:
            sampling["guidance_scale"] = guidance
        if self.options.true_cfg_scale is not None:
            sampling["true_cfg_scale"] = self.options.true_cfg_scale
        fields: dict[str, Any] = {"prompt": request.prompt}
        if self.options.negative_prompt is not None:
            fields["negative_prompt"] = self.options.negative_prompt
        if input_path is not None:
            fields["inputs"] = {"image_path": str(input_path)}
        fields["sampling"] = sampling
        fields["output"] = {"output_path": str(self._scratch), "save_video": False, "return_frames": True}
        return fields

    def generate(self, request: ImageRequest) -> Image.Image:
        """One image: a one-frame ``generate(GenerationRequest)``; an edit passes ``image`` as ``inputs.image_path``."""
        # 1. The typed request.
        check_request(self.name, self.max_references, request)
        input_path = None
        if request.image is not None:
            input_path = self._scratch / f"input-{uuid.uuid4().hex}.png"
            request.image.convert("RGB").save(input_path, format="PNG")
        # 2. Generate.
        try:
            typed = self._api.parse_config(
                self._api.GenerationRequest, self.request_fields(request, input_path)
            )
            with self._lock:
                result = self.generator.generate(typed)
        except (RuntimeError, ValueError, TypeError, OSError) as exc:
            raise BackendError(f"{self.name}: generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if input_path is not None:
                input_path.unlink(missing_ok=True)
        # 3. First frame of the first result, at the requested size.
        try:
            output = frame_to_image(_first_frame(result))
        except BackendError as exc:
            raise BackendError(f"{self.name}: {exc}") from None
        if output.size != (request.width, request.height):
            output = ImageOps.fit(output, (request.width, request.height), Image.Resampling.LANCZOS)
        return output

    def close(self) -> None:
        """Stop FastVideo's workers and remove the scratch folder (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        shutdown = getattr(self.generator, "shutdown", None)
        if callable(shutdown):
            shutdown()
        self._cleanup()
