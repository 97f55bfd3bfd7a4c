"""interleave-thinker: interleaved text-and-image generation with a planner and a critic."""

from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.runtime.pipeline import Pipeline, Result, StepOutput

__all__ = ["InterleaveThinkerError", "Pipeline", "PipelineConfig", "Result", "StepOutput"]
__version__ = "0.1.0"
