"""Deterministic backends that ship with the library, to drive the whole loop without models.

They record every call, so tests (and users debugging a config) can assert on exactly what the
agents sent: the messages, the number of images, the prompts and seeds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Unpack

from PIL import Image

from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    ImageBatchMixin,
    ImageRequest,
    Message,
    VLMBatchMixin,
)
from interleave_thinker.backends.references import check_request
from interleave_thinker.core.errors import BackendError

Reply = str | Callable[[list[Message]], str]


class ScriptedVLMBackend(VLMBatchMixin):
    """Answers from a script: a list of replies (or functions of the messages), consumed in order."""

    def __init__(
        self, replies: Iterable[Reply], *, name: str = "scripted", repeat_last: bool = False
    ) -> None:
        self.name = name
        self._replies = list(replies)
        self._repeat_last = repeat_last
        self.calls: list[list[Message]] = []
        self.temperatures: list[float | None] = []
        self.seeds: list[int | None] = []

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        self.calls.append(messages)
        self.temperatures.append(call.temperature)
        self.seeds.append(call.seed)
        if not self._replies:
            raise BackendError(f"{self.name}: the script has no reply left for call {len(self.calls)}")
        reply = self._replies[0] if (self._repeat_last and len(self._replies) == 1) else self._replies.pop(0)
        return reply(messages) if callable(reply) else reply

    @staticmethod
    def images_in(messages: list[Message]) -> list[Image.Image]:
        return [part["image"] for m in messages for part in m["content"] if part.get("type") == "image"]

    @staticmethod
    def text_in(messages: list[Message]) -> str:
        return "".join(part["text"] for m in messages for part in m["content"] if part.get("type") == "text")


class ScriptedImageBackend(ImageBatchMixin):
    """Paints a flat colour derived from (prompt, seed, input), so every distinct call gives a distinct image."""

    max_references = 8  # takes any loop.references policy (the calls keep the requests)

    def __init__(self, *, name: str = "scripted-image", fail_on: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.calls: list[ImageRequest] = []
        self._fail_on = fail_on

    def generate(self, request: ImageRequest) -> Image.Image:
        check_request(self.name, self.max_references, request)
        self.calls.append(request)
        if self._fail_on is not None and self._fail_on(request.prompt):
            raise BackendError(f"{self.name}: scripted failure for prompt {request.prompt!r}")
        image = request.image
        key = f"{request.prompt}|{request.seed}|{image.tobytes()[:64].hex() if image is not None else ''}"
        digest = hashlib.sha256(key.encode()).digest()
        return Image.new("RGB", (request.width, request.height), (digest[0], digest[1], digest[2]))
