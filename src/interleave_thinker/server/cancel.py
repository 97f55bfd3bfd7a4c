"""Stopping a local generation whose client has gone (or whose server is shutting down).

Why here and not in the backend: the backends' ``chat`` has no cancel argument (served or local, a
call is one call), but a transformers model checks its ``stopping_criteria`` after every token. The
VLM service wraps its model's ``generate`` once, so a flag it sets ends the current call at the next
token instead of after ``max_tokens`` of them. The same wrapper hands ``generate`` the streamer of a
streaming request (``stream: true``), so its tokens reach the client as they are made, and counts the
call's tokens for the reply's ``usage`` (:func:`take_generated`), from the ids the model read and wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_generated = threading.local()


@dataclass(frozen=True)
class Generated:
    """What one ``generate`` call of one sequence counted, as vLLM reports it in ``usage``."""

    prompt_tokens: int
    """The model's input ids: the chat template and the image tokens included."""
    completion_tokens: int
    """The tokens generated, the end-of-sequence token included."""
    ended: bool
    """Whether the last of them is an end-of-sequence token (``finish_reason: stop``, else ``length``)."""


def take_generated() -> Generated | None:
    """What the last ``generate`` call of this thread counted (once; None after or without one)."""
    counted: Generated | None = getattr(_generated, "last", None)
    _generated.last = None
    return counted


def _count(model: Any, input_ids: Any, output: Any) -> Generated | None:
    """The counts of a one-sequence call from its input ids and ``generate``'s output; None for a batch."""
    sequences = getattr(output, "sequences", output)
    shape = getattr(input_ids, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != 1 or getattr(sequences, "shape", (0,))[0] != 1:
        return None
    new = [int(token) for token in sequences[0, shape[1] :].tolist()]
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ends = {eos} if isinstance(eos, int) else set(eos or ())
    return Generated(int(shape[1]), len(new), bool(new) and new[-1] in ends)


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
        output = generate(*args, stopping_criteria=criteria, **kwargs)
        _generated.last = _count(model, kwargs.get("input_ids", args[0] if args else None), output)
        return output

    model.generate = guarded  # an instance attribute: shadows the class's method for this model only
    return True


class CallGate:
    """One backend call at a time; the flag of the call running now is what ``should_stop`` reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._current: threading.Event | None = None
        self._streamer: Any = None
        self.cancelled = 0
        self.last_seconds = 0.0
        """How long the last call ran: the retry hint of a request turned away."""
        self.waiting = 0
        """Calls waiting for the lock."""

    def should_stop(self) -> bool:
        current = self._current
        return current is not None and current.is_set()

    def streamer(self) -> Any:
        """The token streamer of the call running now (a streaming request's), else None."""
        return self._streamer

    def run(self, gone: threading.Event, call: Callable[[], str], streamer: Any = None) -> str | None:
        """``call()`` under the lock, unless its client left while it waited (then None)."""
        with self._count_lock:
            self.waiting += 1
        self.lock.acquire()
        with self._count_lock:
            self.waiting -= 1
        try:
            if gone.is_set():
                return None
            self._current, self._streamer = gone, streamer
            start = time.monotonic()
            try:
                return call()
            finally:
                self._current = self._streamer = None
                self.last_seconds = time.monotonic() - start
        finally:
            self.lock.release()
