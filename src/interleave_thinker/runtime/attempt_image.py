"""One attempt procedure, for the loop's steps and the repair calls alike: the generator call, the image
written, then the critic's verdict (unless the attempt is forced) and, with a judge, its scores.

Why one procedure: an attempt records its generation error, its times, its verdict and its scores the same
way wherever it is made, so the trace, the pages and the failure counts read every attempt alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PIL import Image

from interleave_thinker.agents.critic import Critic
from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.messages import white_canvas
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.backends.protocols import ImageBackend, ImageRequest
from interleave_thinker.core.config import GenerationOptions
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.core.types import Attempt, AttemptScores, Durations
from interleave_thinker.runtime.recorder import RunRecorder


@dataclass(frozen=True)
class Attempts:
    """How an attempt is made: with this critic, generator and settings, and (``judge``) scored."""

    critic: Critic
    generator: ImageBackend
    generation: GenerationOptions
    judge: Judge | None = None

    def make(
        self,
        recorder: RunRecorder,
        attempt: Attempt,
        file_name: str,
        before: Image.Image | None,
        references: Sequence[Image.Image] = (),
        *,
        planned: str,
        rewritten: str,
        turn: Turn,
        forced: bool = False,
        critic_references: Sequence[Image.Image] = (),
        made: Image.Image | None = None,
        on_image: Callable[[str], None] | None = None,
    ) -> None:
        """Generate ``attempt`` (edited from ``before``, with ``references``) into ``file_name``; then
        accept it unjudged when ``forced``, else record the critic's verdict (``critic_references``: the
        images it judges consistency against); with a judge, score it (SC/PQ).

        ``made``: the image of this very call, made ahead (``loop.speculate``; its durations already on
        ``attempt``). ``on_image``: called with the file name once the image is written, before the critic."""
        image = made or generate_attempt(self.generator, self.generation, attempt, before, tuple(references))
        if image is None:
            return
        attempt.image_file = recorder.add_image(file_name, image)
        if on_image is not None:
            on_image(attempt.image_file)
        shown_before = before if before is not None else white_canvas()
        if forced:
            attempt.accepted = attempt.forced = True
        else:
            result = self.critic.review(
                before=shown_before,
                after=image,
                original_instruction=planned,
                rewritten_prompt=rewritten,
                turn=turn,
                references=list(critic_references),
            )
            result.record(attempt)
        if self.judge is not None:
            judged = self.judge.judge(shown_before, image, planned)  # after resized to before's size
            attempt.scores = AttemptScores(
                sc=judged.sc, pq=judged.pq, error=judged.error, raw_replies=judged.raw_replies
            )


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
