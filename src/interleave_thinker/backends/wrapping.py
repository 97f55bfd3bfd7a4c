"""One base for every backend wrapper (limiters, meters, the page's reporters, test recorders).

Why: the batch runtime reads :class:`~interleave_thinker.backends.protocols.ServedBackend`'s optional
members off whatever it wraps. Four wrapper families used to forward them by hand, and the one that
forgot (the meters of `data generate`) kept the transport at 8 slots under ``--per-backend-limit``,
ran served calls on threads, and hid a pool file's ``slots=``. Here they are forwarded once, explicitly
(no ``__getattr__``: a member the protocol does not name is not passed through by accident). A chat
wrapper's call to what it wraps is written once too (:class:`VLMWrapper`), with the seed rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interleave_thinker.backends.protocols import (
    ChatOptions,
    Closeable,
    Message,
    ServedBackend,
    VLMBatchMixin,
    seed_kwargs,
)

MAX_WRAPPERS = 32
"""How deep :func:`chain` looks: a longer chain is a loop of wrappers, not a design."""


# --- the optional members, read here and nowhere else -----------------------------------------------
# A backend may lack any of them (a user's object with only ``chat`` or ``generate``); each reader says
# the default the protocols document (``backends/protocols.py``: ServedBackend, Closeable, ImageBackend).


def chain(backend: Any) -> list[Any]:
    """``backend`` and every backend it wraps (``Wrapper.inner``), outermost first: the one walker."""
    found = [backend]
    while len(found) <= MAX_WRAPPERS:
        inner = getattr(found[-1], "inner", None)
        if inner is None or inner is found[-1]:
            break
        found.append(inner)
    return found


def innermost(backend: Any) -> Any:
    """The backend under every wrapper: the one whose transport the limiters share."""
    return chain(backend)[-1]


def is_cooperative(backend: Any) -> bool:
    """``ServedBackend.cooperative``; False (run in an executor) when not declared."""
    return bool(getattr(backend, "cooperative", False))


def concurrency_setter(backend: Any) -> Callable[[int], None] | None:
    """``ServedBackend.set_concurrency``, or None for a backend with no transport to resize."""
    resize = getattr(backend, "set_concurrency", None)
    return resize if callable(resize) else None


def declared_capacity(backend: Any) -> int | None:
    """``ServedBackend.capacity`` (a pool file's slots, summed), or None when not declared."""
    value = getattr(backend, "capacity", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reference_cap(backend: Any) -> int:
    """The references ``backend`` declares it takes (``max_references``), 0 when it declares none."""
    value = getattr(backend, "max_references", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def backend_name(backend: Any, default: str | None = None) -> str:
    """``name``; else ``default``; else the class name."""
    name = getattr(backend, "name", None)
    if isinstance(name, str) and name:
        return name
    return default if default is not None else type(backend).__name__


def backend_spec(backend: Any) -> str | None:
    """The spec a backend loaded from one carries (``backends.specs`` sets ``spec``), or None."""
    spec = getattr(backend, "spec", None)
    return spec if isinstance(spec, str) and spec else None


def generator_device(backend: Any) -> str | None:
    """``generator_device`` of ``backend`` or of a backend it wraps: where a local generator seeds its
    ``torch.Generator`` (``cpu``, ``cuda:0``); None when not declared (a served generator seeds on its server)."""
    for layer in chain(backend):
        value = getattr(layer, "generator_device", None)
        if isinstance(value, str) and value:
            return value
    return None


def close_backend(backend: Any) -> None:
    """``close`` it; nothing for an object without one (``Closeable`` documents it as harmless twice)."""
    close = getattr(backend, "close", None)
    if callable(close):
        close()


def last_usage(backend: Any) -> dict[str, Any]:
    """The token counts of the last reply in this thread (``last_usage()`` of the OpenAI-compatible and
    Gemini backends), looked up through wrappers that lack it; empty when none reports any."""
    for current in chain(backend):
        usage = getattr(current, "last_usage", None)
        if callable(usage):
            return dict(usage())
    return {}


class Wrapper(Closeable, ServedBackend):
    """Keeps the wrapped backend as ``inner`` (``runtime/used_backends.py`` and the token meter look
    through it), takes its ``name``, and forwards ``cooperative``, ``set_concurrency``, ``capacity``,
    ``max_references`` and ``close``. A subclass that changes how a call blocks, or must not close what it wraps, overrides
    the member and says why."""

    inner: Any
    name: str

    def __init__(self, inner: Any, *, name: str | None = None) -> None:
        self.inner = inner
        self.name = name if name is not None else backend_name(inner)

    @property
    def cooperative(self) -> bool:
        """The wrapped backend's: a wrapper adds no blocking point of its own."""
        return is_cooperative(self.inner)

    def set_concurrency(self, concurrency: int) -> None:
        """Passed to the wrapped backend; nothing to resize when it is not served."""
        resize = concurrency_setter(self.inner)
        if resize is not None:
            resize(concurrency)

    @property
    def capacity(self) -> int | None:
        """The wrapped backend's declared slots, or None."""
        return declared_capacity(self.inner)

    @property
    def max_references(self) -> int:
        """The wrapped generator's reference cap (``backends/references.py``): the load-time check of
        ``loop.references`` reads it through limiters and meters."""
        return reference_cap(self.inner)

    def close(self) -> None:
        close_backend(self.inner)


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

    def pass_on(self, messages: list[Message], options: ChatOptions) -> str:
        """The wrapped backend's reply to a chat whose options this wrapper only passes on: the options
        not given stay the wrapped backend's to default; the seed goes to a backend that takes one."""
        rest = {key: value for key, value in options.items() if key != "seed"}
        return str(self.inner.chat(messages, **rest, **seed_kwargs(self.inner, options.get("seed"))))
