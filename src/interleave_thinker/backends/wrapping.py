"""One base for every backend wrapper (limiters, meters, the page's reporters, test recorders).

Why: the batch runtime reads :class:`~interleave_thinker.backends.protocols.ServedBackend`'s optional
members off whatever it wraps. Four wrapper families used to forward them by hand, and the one that
forgot (the meters of `data generate`) kept the transport at 8 slots under ``--per-backend-limit``,
ran served calls on threads, and hid a pool file's ``slots=``. Here they are forwarded once, explicitly
(no ``__getattr__``: a member the protocol does not name is not passed through by accident). A chat
wrapper's call to what it wraps is written once too (:class:`VLMWrapper`), with the seed rule.
"""

from __future__ import annotations

from typing import Any

from interleave_thinker.backends.protocols import Closeable, Message, VLMBatchMixin, seed_kwargs
from interleave_thinker.backends.references import reference_cap


class Wrapper(Closeable):
    """Keeps the wrapped backend as ``inner`` (``runtime/used_backends.py`` and the token meter look
    through it), takes its ``name``, and forwards ``cooperative``, ``set_concurrency``, ``capacity``,
    ``max_references`` and ``close``. A subclass that changes how a call blocks, or must not close what it wraps, overrides
    the member and says why."""

    inner: Any
    name: str

    def __init__(self, inner: Any, *, name: str | None = None) -> None:
        self.inner = inner
        self.name = name if name is not None else str(getattr(inner, "name", type(inner).__name__))

    @property
    def cooperative(self) -> bool:
        """The wrapped backend's: a wrapper adds no blocking point of its own."""
        return bool(getattr(self.inner, "cooperative", False))

    def set_concurrency(self, concurrency: int) -> None:
        """Passed to the wrapped backend; nothing to resize when it is not served."""
        resize = getattr(self.inner, "set_concurrency", None)
        if callable(resize):
            resize(concurrency)

    @property
    def capacity(self) -> int | None:
        """The wrapped backend's declared slots, or None."""
        value = getattr(self.inner, "capacity", None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def max_references(self) -> int:
        """The wrapped generator's reference cap (``backends/references.py``): the load-time check of
        ``loop.references`` reads it through limiters and meters."""
        return reference_cap(self.inner)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


class VLMWrapper(Wrapper, VLMBatchMixin):
    """A wrapper of a chat backend (meters, limiters, the page's reporters): what it does around a call
    is its own; the call itself is :meth:`forward_chat`."""

    def forward_chat(
        self, messages: list[Message], max_new_tokens: int, temperature: float | None, seed: int | None
    ) -> str:
        """The wrapped backend's reply; the seed is passed only to a backend that takes one
        (:func:`~interleave_thinker.backends.protocols.seed_kwargs`)."""
        return str(
            self.inner.chat(
                messages,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                **seed_kwargs(self.inner, seed),
            )
        )
