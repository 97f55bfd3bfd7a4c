"""Stopping a local generation whose client has gone (or whose server is shutting down).

Why here and not in the backend: the backends' ``chat`` has no cancel argument (served or local, a
call is one call), but a transformers model checks its ``stopping_criteria`` after every token. The
VLM service wraps its model's ``generate`` once, so a flag it sets ends the current call at the next
token instead of after ``max_tokens`` of them. The same wrapper hands ``generate`` the streamer of a
streaming request (``stream: true``), so its tokens reach the client as they are made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def install_stop_check(
    backend: Any, should_stop: Callable[[], bool], streamer: Callable[[], Any] = lambda: None
) -> bool:
    """Make ``backend.model.generate`` stop as soon as ``should_stop()`` is true, and stream to
    ``streamer()`` when it is not None; False when the backend has no such model (the call then runs
    to its end, bounded by the service's ``max_tokens``)."""
    model = getattr(backend, "model", None)
    generate = getattr(model, "generate", None)
    if model is None or not callable(generate):
        return False
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopWhenAsked(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            stop = should_stop()
            return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        criteria.append(StopWhenAsked())
        current = streamer()
        if current is not None and kwargs.get("streamer") is None:
            kwargs["streamer"] = current
        return generate(*args, stopping_criteria=criteria, **kwargs)

    model.generate = guarded  # an instance attribute: shadows the class's method for this model only
    return True


class CallGate:
    """One backend call at a time; the flag of the call running now is what ``should_stop`` reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._current: threading.Event | None = None
        self._streamer: Any = None
        self.cancelled = 0

    def should_stop(self) -> bool:
        current = self._current
        return current is not None and current.is_set()

    def streamer(self) -> Any:
        """The token streamer of the call running now (a streaming request's), else None."""
        return self._streamer

    def run(self, gone: threading.Event, call: Callable[[], str], streamer: Any = None) -> str | None:
        """``call()`` under the lock, unless its client left while it waited (then None)."""
        with self.lock:
            if gone.is_set():
                return None
            self._current, self._streamer = gone, streamer
            try:
                return call()
            finally:
                self._current = self._streamer = None
