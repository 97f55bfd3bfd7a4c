"""The two backend protocols every model sits behind.

A backend is a small class with one method to call (plus a batched form with a default loop), so a
new model or service is one file. Agents and the runtime only ever see these protocols.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypedDict, Unpack, runtime_checkable

from PIL import Image

Message = dict[str, Any]
MAX_NEW_TOKENS = 4096
"""The reply budget of a ``chat`` call that names none: every signature that states a default uses this."""


TEMPERATURE = 0.0
"""The temperature of a call that names none: greedy."""


class BatchOptions(TypedDict, total=False):
    """The keyword options of :meth:`VLMBackend.chat_batch` (and of ``chat``, with a seed)."""

    max_new_tokens: int
    temperature: float | None


class ChatOptions(BatchOptions, total=False):
    """The keyword options of :meth:`VLMBackend.chat`, for code that only passes them on (a wrapper, a
    test double): ``def chat(self, messages, **options: Unpack[ChatOptions])`` conforms to the protocol
    without restating its defaults, and the options it was not given stay the callee's to default."""

    seed: int | None


@dataclass(frozen=True)
class ChatCall:
    """The options of one ``chat`` call as a backend reads them: those not given at the protocol's defaults
    (``ChatCall(**options)`` in a ``chat(self, messages, **options: Unpack[ChatOptions])``), so a backend
    states no default of its own."""

    max_new_tokens: int = MAX_NEW_TOKENS
    temperature: float | None = TEMPERATURE
    seed: int | None = None


@runtime_checkable
class VLMBackend(Protocol):
    """A chat model that reads text and images and answers text."""

    name: str

    def chat(
        self,
        messages: list[Message],
        *,
        max_new_tokens: int = MAX_NEW_TOKENS,
        temperature: float | None = TEMPERATURE,
        seed: int | None = None,
    ) -> str:
        """One reply to one conversation.

        ``temperature``: 0 is greedy, a number samples at it, None leaves the model's own generation
        settings in charge (a checkpoint's ``generation_config.json``, a server's defaults). ``seed`` is
        the call's seed (``agents/seeds.py``): a backend that can seed its sampling does, others ignore it
        (a ``chat`` without the parameter still works: callers pass it through :func:`seed_kwargs`).
        """
        ...

    def chat_batch(
        self,
        conversations: list[list[Message]],
        *,
        max_new_tokens: int = MAX_NEW_TOKENS,
        temperature: float | None = TEMPERATURE,
    ) -> list[str]:
        """Replies to several independent conversations, in order."""
        ...


def seed_kwargs(backend: object, seed: int | None) -> dict[str, int]:
    """``{"seed": seed}`` for ``backend.chat`` when it takes a seed, else nothing.

    Why: ``seed`` joined the protocol after backends were written to it without one (a user's object
    with ``chat(messages, *, max_new_tokens, temperature)``); those keep working, unseeded.
    """
    if seed is None:
        return {}
    try:
        parameters = inspect.signature(backend.chat).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return {}
    takes = "seed" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    return {"seed": seed} if takes else {}


@dataclass(frozen=True)
class ImageRequest:
    """One image generation: text-to-image when ``image`` is None, an edit of ``image`` otherwise.

    Why a value and not keywords: the same seven fields travel through the loop, the limiter, the
    micro-batcher, the generator service and the rewards; one frozen object keeps them together and
    lets batches be lists of requests instead of dicts. ``steps``/``guidance`` None means the model's
    own default (``backends.model_defaults``)."""

    prompt: str
    image: Image.Image | None = None
    width: int = 1024
    height: int = 1024
    seed: int = 0
    steps: int | None = None
    guidance: float | None = None
    references: tuple[Image.Image, ...] = ()
    """Images the result must stay consistent with (the subject, the style), in order, beside ``image``;
    empty in the released loop (``loop.references``). A backend declares how many it takes
    (``max_references``) and refuses more at load time."""

    @property
    def settings(self) -> tuple[int, int, int | None, float | None]:
        """(width, height, steps, guidance): text-to-image requests equal here can share one batch."""
        return self.width, self.height, self.steps, self.guidance


@runtime_checkable
class ImageBackend(Protocol):
    """An image generator: one :class:`ImageRequest` in, one image of its size out."""

    name: str

    def generate(self, request: ImageRequest) -> Image.Image: ...

    def generate_batch(self, requests: list[ImageRequest]) -> list[Image.Image]:
        """Several generations, in order."""
        ...


@runtime_checkable
class ServedBackend(Protocol):
    """The optional members of a backend that talks to a server (every ``RemoteBackend``).

    Why declared: the batch runtime reads them off whatever it is given (``runtime/limits.py``,
    ``runtime/scheduler.py``), and a wrapper that forgot one silently changed how a batch runs (calls on
    threads instead of the event loop, the transport at its default 8 slots, a pool file's ``slots=``
    ignored). Every wrapper inherits :class:`~interleave_thinker.backends.wrapping.Wrapper`, which
    forwards them to the backend it wraps."""

    @property
    def cooperative(self) -> bool:
        """True when every blocking point of a call waits cooperatively (HTTP through the caller), so a batch
        may run the call on its event loop; a backend without the member is run in an executor."""
        ...

    def set_concurrency(self, concurrency: int) -> None:
        """Allow ``concurrency`` calls in flight in the transport (the scheduler's per-backend limit)."""
        ...

    @property
    def capacity(self) -> int | None:
        """The calls the server side declares it takes at once (a pool file's ``slots=``, summed), or None."""
        ...


class Closeable:
    """``close`` (nothing to release by default) and use as a context manager, so every backend can be
    closed the same way whether or not it holds a connection, a process or a scratch folder."""

    def close(self) -> None:
        """Release what the backend holds; calling it twice is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VLMBatchMixin(Closeable):
    """``chat_batch`` declared once: a backend says how it answers several conversations in
    :meth:`_chat_many` (default: one ``chat`` call per conversation)."""

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        raise NotImplementedError

    def chat_batch(self, conversations: list[list[Message]], **options: Unpack[BatchOptions]) -> list[str]:
        """The protocol's ``chat_batch``, its defaults taken from the protocol's constants."""
        tokens = options.get("max_new_tokens", MAX_NEW_TOKENS)
        return self._chat_many(conversations, tokens, options.get("temperature", TEMPERATURE))

    def _chat_many(
        self, conversations: list[list[Message]], max_new_tokens: int, temperature: float | None
    ) -> list[str]:
        """Replies in order; a backend that batches or calls concurrently overrides this."""
        return [self.chat(c, max_new_tokens=max_new_tokens, temperature=temperature) for c in conversations]


class ImageBatchMixin(Closeable):
    """Default ``generate_batch``: one ``generate`` call per request."""

    def generate(self, request: ImageRequest) -> Image.Image:
        raise NotImplementedError

    def generate_batch(self, requests: list[ImageRequest]) -> list[Image.Image]:
        return [self.generate(request) for request in requests]
