"""Progress of long one-off builds (the tiny models), from the code that builds to whoever shows it.

Why in ``core``: the builder (``tiny``) may not import the display (``cli``, a layer above it); both may
import this. A display enters :func:`reporting_builds`; builds started inside it
call the reporter's methods (from the calling thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


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
