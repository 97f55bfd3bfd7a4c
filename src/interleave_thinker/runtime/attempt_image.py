"""One attempt's image: the generator call that the loop's attempts and the repair calls both make.

Why one function: an attempt records its generation error and its generation time the same way wherever
it is made, so the trace, the pages and the failure counts read every attempt alike.
"""

from __future__ import annotations

import time

from PIL import Image

from interleave_thinker.backends.protocols import ImageBackend, ImageRequest
from interleave_thinker.core.config import GenerationOptions
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.core.types import Attempt, Durations


def generate_attempt(
    generator: ImageBackend,
    generation: GenerationOptions,
    attempt: Attempt,
    before: Image.Image | None,
    references: tuple[Image.Image, ...],
) -> Image.Image | None:
    """The image for ``attempt`` (its prompt and seed, edited from ``before``), or None with the
    generation error recorded; the time goes in its durations."""
    start = time.perf_counter()
    try:
        request = ImageRequest(
            attempt.prompt,
            image=before,
            seed=attempt.seed,
            references=references,
            **generation.model_dump(),  # width, height, steps, guidance: ImageRequest fields by name
        )
        return generator.generate(request)
    except InterleaveThinkerError as exc:
        attempt.generation_error = str(exc)
        return None
    finally:
        attempt.durations = Durations(generate_s=round(time.perf_counter() - start, 4))
