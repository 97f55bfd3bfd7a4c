"""Recording wrappers for tests: a generator that keeps every call, a VLM that runs the real tiny model and
answers from a script (so a test checks the real processor path and still gets chosen replies)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Unpack

from PIL import Image

from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    ImageBatchMixin,
    ImageRequest,
    Message,
)
from interleave_thinker.backends.wrapping import Wrapper
from interleave_thinker.testing.scripted import ScriptedVLMBackend


@dataclass
class GenCall:
    prompt: str
    seed: int
    image: Image.Image | None
    size: tuple[int, int]
    output: Image.Image


class RecordingImage(Wrapper, ImageBatchMixin):
    """Wraps a real or scripted generator and records each call with its output (the served members
    and ``close`` pass through, :class:`Wrapper`)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, name=inner.name)
        self.calls: list[GenCall] = []

    def generate(self, request: ImageRequest) -> Image.Image:
        output: Image.Image = self.inner.generate(request)
        size = (request.width, request.height)
        self.calls.append(GenCall(request.prompt, request.seed, request.image, size, output))
        return output


class ScriptedOverTiny(ScriptedVLMBackend):
    """Runs the real tiny model on every call (processor + generate), then answers from the script."""

    def __init__(self, real: Any, replies: list[Any], **kwargs: Any) -> None:
        super().__init__(replies, **kwargs)
        self.real = real
        self.processed_images: list[int] = []
        self._lock = (
            threading.Lock()
        )  # the real model (and our patch of its processor) serves one call at a time

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        with self._lock:
            return self._chat(
                messages, max_new_tokens=call.max_new_tokens, temperature=call.temperature, seed=call.seed
            )

    def _chat(
        self, messages: list[Message], *, max_new_tokens: int, temperature: float | None, seed: int | None
    ) -> str:
        processor = self.real.processor
        original = processor.apply_chat_template

        def recording(*args: Any, **kwargs: Any) -> Any:
            inputs = original(*args, **kwargs)
            grid = inputs.get("image_grid_thw")
            self.processed_images.append(0 if grid is None else int(grid.shape[0]))
            pad_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
            expected = 0 if grid is None else int((grid.prod(-1) // 4).sum())
            assert int((inputs["input_ids"] == pad_id).sum()) == expected
            return inputs

        processor.apply_chat_template = recording
        try:
            reply = self.real.chat(messages, max_new_tokens=2, temperature=0.0)
        finally:
            processor.apply_chat_template = original
        assert isinstance(reply, str)
        return super().chat(messages, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
