"""Speculative next steps (``loop.speculate``): the next step's first generator call starts from an image
while the critic is still judging it.

Why: in the released loop each step's generator call waits for the previous step's verdict, although
that verdict is usually "accepted"; where the critic accepts most images the request's time goes to that
wait. With ``loop.speculate: 1``, as soon as an attempt that could be kept (a round's first, in seed
order) has its image written, the next image step's attempt 0 (its planned prompt, its seed, that image
as ``image``, its references) is sent to the generator; with ``2`` the image that call returns starts the
step after it too, two steps ahead of the critic.

Why the kept sequence is the same, always: a speculation is only ever used as the image of the very call
the loop makes next. When the loop makes a step's attempt 0 it takes the speculation whose prompt, seed,
``image`` file and reference files are the attempt's own (and whose parent, for a call two steps ahead,
was itself kept); every other speculation for that step is cancelled and recorded ``discarded``, its
image never written, and the call is made again from the kept image. A seed or a prompt never comes from
a speculation; a speculation whose call failed is discarded, not used. Each is recorded in the trace
(``StepRecord.speculations``, kept or discarded) in the step that settled it.

Where the calls run: like a candidate, in a greenlet of its own on the event loop (a batch's, or outside a
batch a private one around the request, closed after it), so it passes the generator's limiter like any
call; inside a call the context variable :data:`SPECULATIVE` is True, so the batch's limiter can cap them
(``--speculate-share``). A local model's call does not yield, so its calls do not overlap: the result is
the same and no time is gained. Under an event loop that is not ours (a notebook cell) a speculation is
made only when it is taken.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from PIL import Image

from interleave_thinker.backends.protocols import ImageBackend
from interleave_thinker.core.config import GenerationOptions, LoopOptions
from interleave_thinker.core.green import await_only, finish_loop, in_green, run_green
from interleave_thinker.core.types import Attempt, Durations, Speculated, Trace
from interleave_thinker.runtime.attempt_image import generate_attempt
from interleave_thinker.runtime.references import Named, References

T = TypeVar("T")

SPECULATIVE: ContextVar[bool] = ContextVar("speculative", default=False)
"""True inside a speculative generator call (the batch's generator limiter counts these apart)."""

_KEPT_MODES = ("RGB", "RGBA", "L")
"""Modes a run folder keeps as they are: an image in another mode is read back converted, so a call
made ahead from it would not be the loop's call."""


def on_private_loop(fn: Callable[[], T]) -> T:
    """``fn()`` in a greenlet on a private event loop, closed after it, so calls made ahead overlap;
    inside a greenlet already, or under a loop that is not ours, ``fn()`` as it is."""
    if in_green():
        return fn()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_green_then_close(fn))
    return fn()


async def _green_then_close(fn: Callable[[], T]) -> T:
    try:
        return await run_green(fn)
    finally:
        await finish_loop()


def _retrieve(task: asyncio.Task[Image.Image | None]) -> None:
    """A task's exception counts as seen (a discarded speculation's is of no interest)."""
    if not task.cancelled():
        task.exception()


@dataclass(eq=False)
class Speculation:
    """One call made ahead for ``step``'s attempt 0; ``attempt`` holds its request and, when done, its
    durations and generation error."""

    attempt: Attempt
    parent: Speculation | None
    state: Literal["open", "kept", "discarded"] = "open"
    image: Image.Image | None = None
    task: asyncio.Task[Image.Image | None] | None = None
    call: Callable[[], Image.Image | None] | None = None
    """The call itself (a task runs it; without one it is made when taken)."""
    started: float | None = None
    """``perf_counter`` when its generator call began; None while it has not."""

    @property
    def ahead(self) -> int:
        """Steps this call runs ahead of the last settled one (1 + its open ancestors)."""
        return 1 + (self.parent.ahead if self.parent is not None and self.parent.state == "open" else 0)

    def matches(self, attempt: Attempt) -> bool:
        mine = self.attempt
        same = (
            mine.step_number,
            mine.attempt,
            mine.prompt,
            mine.seed,
            mine.before_image,
            mine.references,
        ) == (
            attempt.step_number,
            attempt.attempt,
            attempt.prompt,
            attempt.seed,
            attempt.before_image,
            attempt.references,
        )
        return same and (self.parent is None or self.parent.state == "kept")

    def result(self) -> Image.Image | None:
        if self.task is not None:
            return await_only(self.task)
        assert self.call is not None
        return self.call()

    def record(self, state: Literal["kept", "discarded"]) -> Speculated:
        self.state = state
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.call = self.task = None  # the call refers to this object: no cycle left for the collector
        a = self.attempt
        took = a.durations.generate_s
        if not took and self.started is not None:  # cancelled while on its way
            took = round(time.perf_counter() - self.started, 4)
        return Speculated(
            step_number=a.step_number,
            attempt=a.attempt,
            seed=a.seed,
            prompt=a.prompt,
            before_image=a.before_image,
            speculative=state,
            called=self.started is not None,
            generate_s=took,
        )


@dataclass
class Speculator:
    """The calls made ahead for one request (see the module doc)."""

    options: LoopOptions
    generator: ImageBackend
    generation: GenerationOptions
    planned: dict[int, str]
    """The planned prompt of each image step by position (1-based)."""
    seed: Callable[[int, int], int]
    references: References | None
    trace: Trace
    open: list[Speculation] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return self.options.speculate

    def start(self, step: int, latest: Named, parent: Speculation | None = None) -> None:
        """Make the next image step's first round (attempt 0, or with ``loop.candidates`` its first N
        attempts) from ``latest`` (``step``'s image), unless it is made from that image already."""
        after = next((j for j in sorted(self.planned) if j > step), None)
        if after is None or latest[0].mode not in _KEPT_MODES:
            return
        if parent is None and any(s.attempt.before_image == latest[1] for s in self.open):
            return  # a kept speculation's image: the calls after it are on their way
        references = self.references.for_attempt(latest) if self.references else []
        images = tuple(image for image, _ in references)
        budget = self.options.generator_budget or self.options.max_attempts
        for index in range(min(self.options.candidates, budget)):
            attempt = Attempt(
                step_number=after,
                attempt=index,
                prompt=self.planned[after],
                seed=self.seed(after, index),
                before_image=latest[1],
                references=[name for _, name in references],
            )
            self._launch(Speculation(attempt, parent), latest[0], images)

    def _launch(self, speculation: Speculation, before: Image.Image, images: tuple[Image.Image, ...]) -> None:
        speculation.call = lambda: self._make(speculation, before, images)
        if in_green():
            speculation.task = asyncio.get_running_loop().create_task(run_green(speculation.call))
            speculation.task.add_done_callback(_retrieve)
        self.open.append(speculation)

    def _make(
        self, speculation: Speculation, before: Image.Image, references: tuple[Image.Image, ...]
    ) -> Image.Image | None:
        speculation.started = time.perf_counter()
        token = SPECULATIVE.set(True)
        try:
            image = generate_attempt(self.generator, self.generation, speculation.attempt, before, references)
        finally:
            SPECULATIVE.reset(token)
        speculation.image = image
        if image is not None and speculation.attempt.attempt == 0 and speculation.ahead < self.depth:
            step = speculation.attempt.step_number
            self.start(step, (image, f"step{step:02d}_attempt0.png"), parent=speculation)
        return image

    def take(self, attempt: Attempt) -> Image.Image | None:
        """The image made ahead for ``attempt``, its durations copied onto it; None when there is none
        (the loop makes the call). The calls for earlier steps, and those for this step that cannot be
        this round's (another image, or not this attempt's request), are discarded."""
        step = attempt.step_number
        stale = [s for s in self.open if s.attempt.step_number < step]
        stale += [
            s
            for s in self.open
            if s.attempt.step_number == step
            and (s.attempt.before_image != attempt.before_image or s.attempt.attempt == attempt.attempt)
            and not s.matches(attempt)
        ]
        for speculation in stale:
            self._discard(speculation)
        match = next((s for s in self.open if s.matches(attempt)), None)
        if match is None:
            return None
        image = match.result()
        if image is None or match.attempt.generation_error is not None:
            self._discard(match)
            return None
        self._settle(match, "kept")
        attempt.durations = Durations(generate_s=match.attempt.durations.generate_s)
        return image

    def round_over(self, step: int) -> None:
        """A new round of ``step`` begins: the calls made from its earlier images are of no use (unless
        a rejected image may still be kept)."""
        if self.options.select_best != "off":  # a rejected image may still be kept
            return
        prefix = f"step{step:02d}_attempt"
        for speculation in [s for s in self.open if s.parent is None]:
            if speculation.attempt.before_image.startswith(prefix):
                self._discard(speculation)

    def close(self) -> None:
        """Discard every call still open (the request ended, or failed)."""
        for speculation in list(self.open):
            self._discard(speculation)

    def _discard(self, speculation: Speculation) -> None:
        if speculation.state != "open":
            return
        self._settle(speculation, "discarded")
        for child in [s for s in self.open if s.parent is speculation]:
            self._discard(child)

    def _settle(self, speculation: Speculation, state: Literal["kept", "discarded"]) -> None:
        self.open.remove(speculation)
        if self.trace.steps:
            self.trace.steps[-1].speculations.append(speculation.record(state))
