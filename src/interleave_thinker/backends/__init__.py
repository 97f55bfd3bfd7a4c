"""Model backends behind two small protocols: :class:`VLMBackend` (chat) and :class:`ImageBackend` (images)."""

from interleave_thinker.backends.protocols import ImageBackend, ImageRequest, VLMBackend
from interleave_thinker.backends.specs import BackendSpec, load_image_backend, load_vlm_backend, parse_spec

__all__ = [
    "BackendSpec",
    "ImageBackend",
    "ImageRequest",
    "VLMBackend",
    "load_image_backend",
    "load_vlm_backend",
    "parse_spec",
]
