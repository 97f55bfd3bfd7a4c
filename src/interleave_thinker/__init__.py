"""interleave-thinker: interleaved text-and-image generation with a planner and a critic.

This is the composition root, above every layer: it wires the ``tiny`` backend kind (``tiny/kind.py``) into
the backend specs (``backends`` cannot import it without pointing an arrow up), so ``tiny:`` works from the
CLI, the UI, the servers and the Python API alike. The registration is light: no torch, diffusers,
transformers or ``train`` module (``tests/project/test_import_cost.py``).
"""

from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.runtime.pipeline import Pipeline, Result, StepOutput
from interleave_thinker.tiny.kind import register_tiny_kind

register_tiny_kind()

__all__ = ["InterleaveThinkerError", "Pipeline", "PipelineConfig", "Result", "StepOutput"]
__version__ = "0.1.0"
