"""Progress of long one-off builds (the tiny models, a training run's set-up), from the code that builds
to whoever shows it.

Why in ``core``: the builder (``tiny``) may not import the display (``cli``, a layer above it); both may
import this. A display enters :func:`reporting_builds`; builds started inside it
call the reporter's methods (from the calling thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Phase = Callable[[str], contextlib.AbstractContextManager[object]]
"""Shows one phase of building a training run (``with phase("loading model x"): ...``); the CLI passes one
that prints the phase and its time, so the seconds before the progress bar are not silent."""


def no_phase(text: str) -> contextlib.AbstractContextManager[object]:
    """The default :data:`Phase`: shows nothing (library callers and tests)."""
    return contextlib.nullcontext()


class BuildReporter:
    """Told when a build starts, how far it is and when it ends; the CLI's display subclasses it."""

    def start(self, what: str) -> None:
        """A build of ``what`` (e.g. "the format-trained tiny planner") begins."""

    def step(self, what: str, done: int, total: int) -> None:
        """``done`` of ``total`` steps of the build are finished."""

    def end(self, what: str) -> None:
        """The build finished (or failed: the caller raises next)."""


_reporters: list[BuildReporter] = []


@contextlib.contextmanager
def reporting_builds(reporter: BuildReporter) -> Iterator[BuildReporter]:
    """Send the progress of every build started in this block to ``reporter``."""
    _reporters.append(reporter)
    try:
        yield reporter
    finally:
        _reporters.remove(reporter)


def current_reporter() -> BuildReporter | None:
    return _reporters[-1] if _reporters else None
