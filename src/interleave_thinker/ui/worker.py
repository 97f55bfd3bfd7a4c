"""Runs one request in a thread and turns the loop's progress into a queue of events the page drains.

The loop's observer hooks say when planning starts, the plan, an attempt's start and end, and a step's
end. The page also wants the attempt's image the moment it exists (before the critic answers) and to
know when the critic is thinking, so the run's generator and critic are wrapped here to report those.
Every hook and wrapper checks the run's cancel flag, so Stop takes effect before the next model call.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from PIL import Image

from interleave_thinker.backends import protocols as proto
from interleave_thinker.backends.wrapping import VLMWrapper, Wrapper, backend_name
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.core.types import Attempt, Plan, StepRecord
from interleave_thinker.runtime.observer import Observer
from interleave_thinker.runtime.pipeline import Pipeline, Result
from interleave_thinker.ui.redo import Redo

logger = logging.getLogger(__name__)

TERMINAL = ("done", "cancelled", "error")
MAX_MESSAGE = 600


class RunCancelled(Exception):
    """Stop was pressed. Not an InterleaveThinkerError, so the loop never records it as a failed call."""


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run; ``payload`` is a copy owned by the page."""

    kind: str
    step: int = 0
    attempt: int = 0
    payload: Any = None


def one_line(message: str) -> str:
    """The first line of an error, bounded: the page shows messages, never tracebacks."""
    first = (message.strip().splitlines() or ["unknown error"])[0]
    return first if len(first) <= MAX_MESSAGE else first[: MAX_MESSAGE - 1] + "…"


class EventSink(Observer):
    """The run's observer: queues events for the page and raises :class:`RunCancelled` on Stop."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.events: queue.Queue[Event] = queue.Queue()
        self.current = (0, 0)

    def check(self) -> None:
        if self.cancel.is_set():
            raise RunCancelled

    def emit(self, kind: str, payload: Any = None) -> None:
        self.check()
        step, attempt = self.current
        self.events.put(Event(kind, step, attempt, payload))

    def finish(self, kind: str, payload: Any = None) -> None:
        self.events.put(Event(kind, payload=payload))

    def drain(self) -> Iterator[Event]:
        """Every event in order, ending with the terminal one."""
        while True:
            event = self.events.get()
            yield event
            if event.kind in TERMINAL:
                return

    def on_planning(self) -> None:
        self.emit("planning")

    def on_plan(self, plan: Plan) -> None:
        self.emit("plan", plan.model_copy(deep=True))

    def on_attempt_start(self, step_index: int, attempt: int, prompt: str) -> None:
        self.current = (step_index, attempt)
        self.emit("attempt_start", prompt)

    def on_attempt_end(self, step_index: int, attempt: Attempt) -> None:
        self.current = (step_index, attempt.attempt)
        self.emit("attempt_end", attempt.model_copy(deep=True))

    def on_step_end(self, step_index: int, record: StepRecord) -> None:
        self.current = (step_index, 0)
        self.emit("step_end", record.model_copy(deep=True))


class _Reporting(Wrapper):
    """The served members pass through (:class:`Wrapper`); ``close`` does not: the backends are the
    page's, shared by every run, and outlive this one."""

    def close(self) -> None:
        """Nothing of this run's own to release."""


class ReportingGenerator(_Reporting, proto.ImageBatchMixin):
    """Forwards to the shared generator and reports each image as soon as it is made."""

    def __init__(self, inner: proto.ImageBackend, sink: EventSink) -> None:
        super().__init__(inner, name=backend_name(inner, "generator"))
        self.sink = sink

    def generate(self, request: proto.ImageRequest) -> Image.Image:
        self.sink.check()
        output = self.inner.generate(request)
        self.sink.emit("image", output.copy())
        return output


class ReportingVLM(_Reporting, VLMWrapper):
    """Forwards to a shared planner/critic; checks Stop before each call and reports critic calls."""

    def __init__(self, inner: proto.VLMBackend, sink: EventSink, event: str | None) -> None:
        super().__init__(inner, name=backend_name(inner, "vlm"))
        self.sink, self.event = sink, event

    def chat(self, messages: list[proto.Message], **options: Unpack[proto.ChatOptions]) -> str:
        if self.event:
            self.sink.emit(self.event)
        else:
            self.sink.check()
        return self.pass_on(messages, options)


def run_pipeline(base: Pipeline, config: PipelineConfig) -> tuple[Pipeline, EventSink]:
    """A pipeline for one run: the shared backends behind reporting wrappers, this run's config."""
    sink = EventSink(threading.Event())
    pipe = Pipeline(
        planner=ReportingVLM(base.planner_backend, sink, None),
        critic=ReportingVLM(base.critic_backend, sink, "critic"),
        generator=ReportingGenerator(base.generator, sink),
        config=config,
        templates=base.templates,
    )
    return pipe, sink


def start_run(
    base: Pipeline, config: PipelineConfig, text: str, images: list[str], out_dir: Path
) -> EventSink:
    """Start the run in a daemon thread; its events (ending with done/cancelled/error) go to the sink."""
    return _start(
        base, config, out_dir, lambda pipe, sink: pipe(text, images=images, out_dir=out_dir, observer=sink)
    )


def start_redo(base: Pipeline, config: PipelineConfig, parent: Path, redo: Redo, out_dir: Path) -> EventSink:
    """Start ``Pipeline.redo`` of the run in ``parent`` from ``redo.step`` into ``out_dir``, as :func:`start_run`
    starts a run: the steps before it are copied, not made, so their calls are never sent."""
    return _start(
        base,
        config,
        out_dir,
        lambda pipe, sink: pipe.redo(
            parent, redo.step, out_dir=out_dir, instruction=redo.instruction, seed=redo.seed, observer=sink
        ),
    )


def _start(
    base: Pipeline, config: PipelineConfig, out_dir: Path, call: Callable[[Pipeline, EventSink], Result]
) -> EventSink:
    pipe, sink = run_pipeline(base, config)

    def work() -> None:
        try:
            result = call(pipe, sink)
        except RunCancelled:
            sink.finish("cancelled")
        except InterleaveThinkerError as exc:
            sink.finish("error", one_line(str(exc)))
        except Exception as exc:  # the page gets a message, the server log gets the traceback
            logger.exception("demo run in %s failed", out_dir)
            sink.finish("error", f"internal error ({type(exc).__name__}); the server log has the details.")
        else:
            sink.finish("done", result)

    threading.Thread(target=work, name=f"demo-run-{out_dir.name}", daemon=True).start()
    return sink
