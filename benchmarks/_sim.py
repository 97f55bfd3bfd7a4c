"""Latency-simulating backends for benchmarks: each call sleeps, and at most `capacity` calls run at once
(like a server with that many slots), so wall times can be compared with the capacity bound."""

from __future__ import annotations

import threading
import time
from typing import Any, Unpack

from PIL import Image

from interleave_thinker.backends.protocols import ChatOptions, ImageRequest, Message
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend


class Capacity:
    def __init__(self, latency: float, capacity: int) -> None:
        self.latency = latency
        self.slots = threading.BoundedSemaphore(capacity)
        self.capacity = capacity
        self.calls = 0
        self.busy = 0.0
        self._lock = threading.Lock()

    def spend(self) -> None:
        with self.slots:
            start = time.perf_counter()
            time.sleep(self.latency)
            with self._lock:
                self.calls += 1
                self.busy += time.perf_counter() - start

    def utilisation(self, wall: float) -> float:
        return self.busy / (wall * self.capacity) if wall > 0 else 0.0


class SimVLM(ScriptedVLMBackend):
    def __init__(self, reply: Any, latency: float, capacity: int, name: str = "sim-vlm") -> None:
        super().__init__([reply], name=name, repeat_last=True)
        self.sim = Capacity(latency, capacity)
        self._lock = threading.Lock()

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        self.sim.spend()
        with self._lock:
            return super().chat(messages, **options)


class SimImage(ScriptedImageBackend):
    def __init__(self, latency: float, capacity: int, name: str = "sim-image") -> None:
        super().__init__(name=name)
        self.sim = Capacity(latency, capacity)
        self._lock = threading.Lock()

    def generate(self, request: ImageRequest) -> Image.Image:
        self.sim.spend()
        with self._lock:
            return super().generate(request)
