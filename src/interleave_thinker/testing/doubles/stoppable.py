"""A chat backend whose ``model.generate`` loops like transformers' and can be stopped between tokens.

Why a double: the VLM server stops a generation whose client left by giving ``generate`` a stopping
criterion (``server/cancel.py``); the tests check that it does, on a loop that counts its steps and
says when it ended, without a real model's cost.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Unpack

from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    Message,
    VLMBatchMixin,
)


class CountingModel:
    """Stands in for a transformers model's ``generate`` loop: one step per token (10 ms), asking the
    stopping criteria after each, as ``GenerationMixin`` does; ``finished`` is set when it returns."""

    def __init__(self) -> None:
        self.steps = 0
        self.finished = threading.Event()

    def generate(self, *, max_new_tokens: int, stopping_criteria: Any = None) -> int:
        import torch

        self.steps = 0
        try:
            for _ in range(max_new_tokens):
                self.steps += 1
                time.sleep(0.01)
                if stopping_criteria is not None and bool(stopping_criteria(torch.zeros((1, 1)), None).all()):
                    break
            return self.steps
        finally:
            self.finished.set()


class ModelBackend(VLMBatchMixin):
    """A backend with a ``model`` attribute, like the transformers backend: its reply is one ``x`` per step."""

    def __init__(self) -> None:
        self.name = "model"
        self.model = CountingModel()

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        return "x" * self.model.generate(max_new_tokens=call.max_new_tokens)
