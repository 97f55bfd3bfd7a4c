"""Served planner, critic and generator whose critic judges an attempt by its seed, read from its image.

Why: with parallel candidates (``loop.candidates``) the attempts of a round reach the critic in any
order; a double that answers from a script in call order would make the outcome depend on that order,
which is exactly what the loop must not do. Here the generator paints the seed it was sent (and a
digest of the prompt) into the image, and the critic reads them back from the "after" image, so each
verdict belongs to its attempt whenever it arrives. ``critic_delay`` holds a verdict back by seed (to
make later seeds answer first); ``latency`` gives each role a GPU-like time per call (the bench).

One handler speaks both wire formats on one :class:`~.server.LocalServer`: OpenAI chat
(``POST /v1/chat/completions``, planner and critic, told apart by the prompt) and the "/edit" protocol
(``POST /edit``, the ``http:`` generator). Plans come from :func:`.scripted_models.plan_reply` (2-3 steps, or ``steps``).
"""

from __future__ import annotations

import base64
import io
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from interleave_thinker.testing.doubles.generator import png_b64
from interleave_thinker.testing.doubles.scripted_models import digest, plan_reply, text_of
from interleave_thinker.testing.doubles.server import Reply, Request

Accept = Callable[[int, int], bool]
"""(seed, prompt tag) -> does the critic accept the attempt."""


def paint(seed: int, prompt: str, size: tuple[int, int]) -> Image.Image:
    """A flat image carrying ``seed`` (red, green) and a tag of ``prompt`` (blue)."""
    return Image.new("RGB", size, (seed % 256, seed // 256 % 256, digest(prompt) % 256))


def read_paint(image: Image.Image) -> tuple[int, int]:
    """The (seed, prompt tag) :func:`paint` put in ``image``."""
    red, green, blue = image.convert("RGB").getpixel((0, 0))  # type: ignore[misc]
    return int(red) + 256 * int(green), int(blue)


def chance(p: float, salt: int = 0) -> Accept:
    """A critic that accepts an attempt with probability ``p``, decided by its seed and prompt tag."""
    return lambda seed, tag: digest(str(salt), str(seed), str(tag)) % 10_000 < p * 10_000


def _image_of(encoded: str) -> Image.Image:
    """A base64 PNG, bare (the "/edit" protocol) or as a data URL (OpenAI chat)."""
    data = base64.b64decode(encoded.split(",", 1)[-1])
    with Image.open(io.BytesIO(data)) as opened:
        opened.load()
        return opened.copy()


@dataclass
class SeededWorld:
    """The handler (``LocalServer(world)``); ``log`` holds every answered call in the order answered."""

    accept: Accept
    latency: dict[str, float] = field(default_factory=dict)
    critic_delay: Callable[[int], float] = lambda seed: 0.0
    steps: int | None = None
    """Image steps of every plan; None: 2 or 3 by the request (:func:`.scripted_models.plan_reply`)."""
    log: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: Request) -> Reply:
        if request.method == "GET":
            return Reply(body={"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        body = request.json()
        if request.path.rstrip("/").endswith("/edit"):
            return Reply(body=self._edit(body))
        return Reply(body=self._chat(body))

    def _edit(self, body: dict[str, Any]) -> dict[str, Any]:
        seed, prompt = int(body.get("seed") or 0), str(body["prompt"])
        sent = body.get("image")  # one image, or with references a list: the edited image first
        first = sent[0] if isinstance(sent, list) and sent else sent
        source = read_paint(_image_of(first))[0] if first else None
        self._note({"role": "generator", "seed": seed, "prompt": prompt, "source": source, "at": "start"})
        time.sleep(self.latency.get("generator", 0.0))
        image = paint(seed, prompt, (int(body.get("width", 64)), int(body.get("height", 64))))
        self._note({"role": "generator", "seed": seed, "prompt": prompt, "at": "end"})
        return {"success": True, "edited_image": png_b64(image)}

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        text = text_of(body)
        request = re.search(r'User request: "(.*?)"\n', text, re.DOTALL)
        if request is not None:
            time.sleep(self.latency.get("planner", 0.0))
            reply, _ = plan_reply(request.group(1), self.steps)
            self._note({"role": "planner", "request": request.group(1)})
            return _completion(reply)
        urls = [
            p["image_url"]["url"] for p in body["messages"][-1]["content"] if p.get("type") == "image_url"
        ]
        seed, tag = read_paint(_image_of(urls[1]))  # [before, after, text]
        time.sleep(self.latency.get("critic", 0.0) + self.critic_delay(seed))
        original = re.search(r'meant to achieve: "(.*?)"\n', text, re.DOTALL)
        assert original is not None, text[:200]
        ok = self.accept(seed, tag)
        refine = f"{original.group(1)} / fix {seed}"
        self._note({"role": "critic", "seed": seed, "accepted": ok})
        return _completion(
            f"<think>seed {seed}</think><answer>{{'previous_step_success': {ok}, 'refine_prompt': {refine!r}}}"
            "</answer>"
        )

    def _note(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.log.append(entry)

    def calls(self, role: str, at: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.log if e["role"] == role and (at is None or e.get("at") == at)]


def _completion(content: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "x", "object": "chat.completion", "model": "scripted", "choices": [choice]}
