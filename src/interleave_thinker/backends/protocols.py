"""The two backend protocols every model sits behind.

A backend is a small class with one method to call (plus a batched form with a default loop), so a
new model or service is one file. Agents and the runtime only ever see these protocols.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from PIL import Image

Message = dict[str, Any]


@runtime_checkable
class VLMBackend(Protocol):
    """A chat model that reads text and images and answers text."""

    name: str

    def chat(self, messages: list[Message], *, max_new_tokens: int = 4096, temperature: float = 0.0) -> str:
        """One reply to one conversation; ``temperature=0`` means greedy decoding."""
        ...

    def chat_batch(
        self, conversations: list[list[Message]], *, max_new_tokens: int = 4096, temperature: float = 0.0
    ) -> list[str]:
        """Replies to several independent conversations, in order."""
        ...


@runtime_checkable
class ImageBackend(Protocol):
    """An image generator: text-to-image when ``image`` is None, an edit of ``image`` otherwise."""

    name: str

    def generate(
        self,
        prompt: str,
        *,
        image: Image.Image | None = None,
        width: int = 1024,
        height: int = 1024,
        seed: int = 0,
        steps: int | None = None,
        guidance: float | None = None,
    ) -> Image.Image: ...

    def generate_batch(self, requests: list[dict[str, Any]]) -> list[Image.Image]:
        """Several generations; each dict holds :meth:`generate`'s keyword arguments plus ``prompt``."""
        ...


class VLMBatchMixin:
    """Default ``chat_batch``: one ``chat`` call per conversation."""

    def chat(self, messages: list[Message], *, max_new_tokens: int = 4096, temperature: float = 0.0) -> str:
        raise NotImplementedError

    def chat_batch(
        self, conversations: list[list[Message]], *, max_new_tokens: int = 4096, temperature: float = 0.0
    ) -> list[str]:
        return [self.chat(c, max_new_tokens=max_new_tokens, temperature=temperature) for c in conversations]


class ImageBatchMixin:
    """Default ``generate_batch``: one ``generate`` call per request."""

    def generate(
        self,
        prompt: str,
        *,
        image: Image.Image | None = None,
        width: int = 1024,
        height: int = 1024,
        seed: int = 0,
        steps: int | None = None,
        guidance: float | None = None,
    ) -> Image.Image:
        raise NotImplementedError

    def generate_batch(self, requests: list[dict[str, Any]]) -> list[Image.Image]:
        return [self.generate(**request) for request in requests]
