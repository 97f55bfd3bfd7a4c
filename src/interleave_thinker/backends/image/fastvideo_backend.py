"""Image backend on FastVideo's ``VideoGenerator`` (GPU only), e.g. ``fastvideo:black-forest-labs/FLUX.2-klein-4B``.

Install with ``pip install 'interleave-thinker[fastvideo]'``; FastVideo needs an NVIDIA GPU with CUDA.

FastVideo surface used, as read in ``hao-ai-lab/FastVideo``:

- ``from fastvideo import VideoGenerator`` and ``VideoGenerator.from_pretrained(model_path, num_gpus=N)``
  (``fastvideo/entrypoints/video_generator.py``; ``num_gpus`` is one of its "convenience" kwargs);
- ``generator.generate_video(prompt=..., **kwargs)``, where every kwarg is a ``SamplingParam`` field
  (``fastvideo/api/sampling_param.py``; ``SamplingParam.update`` rejects unknown names). We send
  ``output_path``, ``save_video=False``, ``return_frames=True``, ``num_frames=1``, ``fps=1``, ``height``,
  ``width``, ``seed``, ``num_inference_steps``, ``guidance_scale`` and, for edits, ``image_path`` (a PNG we
  write; FastVideo's own InterleaveThinker adapter, ``fastvideo/entrypoints/interleave/generator.py``,
  passes the input image the same way, and ``examples/inference/basic/basic_flux2_klein.py`` generates a
  single image with ``num_frames=1, fps=1``);
- the result dict's ``"frames"``: a list with one ``H x W x 3`` ``uint8`` array per frame
  (``VideoGenerator._generate_single_video``); a prompt-file run returns a list of such dicts, whose
  first we take;
- ``generator.shutdown()`` in :meth:`FastVideoImageBackend.close`.

Newer FastVideo trees also offer a typed ``generate(GenerationRequest)`` and mark ``generate_video`` as
deprecated (a ``DeprecationWarning``); ``generate_video`` is what every released version has, so we call it.
``output_path`` points at a private scratch folder because FastVideo creates that folder even when it
saves nothing. Seeds are honoured (``SamplingParam.seed``). When ``steps``/``guidance`` are None we use
the authors' settings for known models (FLUX.2-klein: 4 steps, guidance 1.0, as in the diffusers
backend), else FastVideo's own preset for the model. The result is resized to the requested size if the
pipeline returns another one (it aligns sides to 16).
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageOps

from interleave_thinker.backends.model_defaults import find_defaults
from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

INSTALL_HINT = "pip install 'interleave-thinker[fastvideo]'"


def load_video_generator_class() -> Any:
    """``fastvideo.VideoGenerator``, imported only when this backend is used."""
    try:
        fastvideo = importlib.import_module("fastvideo")
    except ImportError as exc:
        raise BackendError(
            f"The fastvideo backend needs FastVideo; install it with {INSTALL_HINT} "
            "(it runs on NVIDIA GPUs with CUDA only)."
        ) from exc
    return fastvideo.VideoGenerator


def frame_to_image(frame: Any) -> Image.Image:
    """One ``H x W x 3`` frame (uint8, or floats in [0, 1]) as an RGB image."""
    array = np.asarray(frame)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise BackendError(f"FastVideo returned a frame of shape {array.shape}; expected (height, width, 3).")
    if array.dtype != np.uint8:
        array = (np.clip(array.astype(np.float32), 0.0, 1.0) * 255).round().astype(np.uint8)
    return Image.fromarray(array).convert("RGB")


class FastVideoImageBackend(ImageBatchMixin):
    """Text-to-image and edits with one-frame FastVideo generations; see the module doc for the surface."""

    def __init__(
        self,
        model: str,
        *,
        num_gpus: int = 1,
        load_kwargs: dict[str, Any] | None = None,
        generator_factory: Callable[..., Any] | None = None,
    ) -> None:
        if not model.strip():
            raise ConfigError(
                "fastvideo spec has no model; write fastvideo:MODEL, "
                "e.g. 'fastvideo:black-forest-labs/FLUX.2-klein-4B'."
            )
        self.model = model.strip()
        self.name = f"fastvideo:{self.model}"
        self.defaults = find_defaults(self.model)  # None: keep FastVideo's preset
        factory = generator_factory or load_video_generator_class().from_pretrained
        try:
            self.generator = factory(self.model, num_gpus=num_gpus, **(load_kwargs or {}))
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
        return cls(target)

    def generate(self, request: ImageRequest) -> Image.Image:
        """One image: a one-frame ``generate_video`` call; an edit passes ``image`` as ``image_path``."""
        # 1. Sampling parameters (SamplingParam field names).
        width, height, steps, guidance = request.settings
        kwargs: dict[str, Any] = {
            "output_path": str(self._scratch),
            "save_video": False,
            "return_frames": True,
            "num_frames": 1,
            "fps": 1,
            "height": height,
            "width": width,
            "seed": request.seed,
        }
        if steps is None and self.defaults is not None:
            steps = self.defaults.steps
        if guidance is None and self.defaults is not None:
            guidance = self.defaults.guidance
        if steps is not None:
            kwargs["num_inference_steps"] = steps
        if guidance is not None:
            kwargs["guidance_scale"] = guidance
        input_path = None
        if request.image is not None:
            input_path = self._scratch / f"input-{uuid.uuid4().hex}.png"
            request.image.convert("RGB").save(input_path, format="PNG")
            kwargs["image_path"] = str(input_path)
        # 2. Generate.
        try:
            with self._lock:
                result = self.generator.generate_video(prompt=request.prompt, **kwargs)
        except (RuntimeError, ValueError, TypeError, OSError) as exc:
            raise BackendError(f"{self.name}: generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if input_path is not None:
                input_path.unlink(missing_ok=True)
        # 3. First frame of the first result, at the requested size.
        if isinstance(result, list):
            result = result[0] if result else {}
        frames = result.get("frames") if isinstance(result, dict) else None
        if not frames:
            raise BackendError(f"{self.name}: FastVideo returned no frames (expected result['frames']).")
        output = frame_to_image(frames[0])
        if output.size != (width, height):
            output = ImageOps.fit(output, (width, height), Image.Resampling.LANCZOS)
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
