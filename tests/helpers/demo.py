"""The demo's test set-ups: a scripted pipeline, a gated generator, a decompression bomb, a served app."""

from __future__ import annotations

import gc
import json
import re
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.backends.protocols import ImageRequest, Message
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from interleave_thinker.ui import DemoOptions, launch_kwargs

NOTICE = "Scripted stand-in models: the plan and verdicts come from a script."
EVIL = "<script>alert(1)</script>${x}"


def plan_for(word: str) -> str:
    """A two-step plan whose step names carry ``word``, so sessions can be told apart."""
    steps = [
        {
            "step_number": 1,
            "step_name": f"{word} sketch",
            "instruction": f"Draw the {word}.",
            "prompt": f"a {word}",
            "auxiliary_text": None,
        },
        {
            "step_number": 2,
            "step_name": f"{word} colour",
            "instruction": "Colour it.",
            "prompt": "colour it",
            "auxiliary_text": f"The {word} in colour.",
        },
    ]
    return f"<think>planning {word}</think><answer>{json.dumps({'execution_plan': steps})}</answer>"


def planner_reply(messages: list[Message]) -> str:
    """Plans for the last word of the request (the first quoted text of the planner template)."""
    text = ScriptedVLMBackend.text_in(messages)
    request = next((q for q in re.findall(r'"([^"]+)"', text)), "request")
    if "EVIL" in request:
        steps = [
            {
                "step_number": 1,
                "step_name": EVIL,
                "instruction": EVIL,
                "prompt": "evil",
                "auxiliary_text": EVIL,
            }
        ]
        return f"<answer>{json.dumps({'execution_plan': steps})}</answer>"
    return plan_for(re.sub(r"[^A-Za-z]", "", request.split()[-1]) or "request")


def critic_reply(messages: list[Message]) -> str:
    """Rejects a first attempt with a refined prompt, accepts any refined one."""
    if "refined:" in ScriptedVLMBackend.text_in(messages):
        return "<think>the step is done</think><answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>"
    return (
        "<think>the colour is wrong <b>here</b></think>"
        "<answer>{'previous_step_success': False, 'refine_prompt': 'refined: try again'}</answer>"
    )


class GatedImage(ScriptedImageBackend):
    """A scripted generator that waits for the test's go-ahead on every call and counts calls in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()

    def generate(self, request: ImageRequest) -> Image.Image:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.entered.release()
        try:
            assert self.release.acquire(timeout=60), "the test never released the generator"
            return super().generate(request)
        finally:
            with self._lock:
                self.in_flight -= 1


def scripted_pipeline(generator: Any = None, **loop: Any) -> Pipeline:
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": {"max_attempts": 3, **loop},
            "generation": {"width": 96, "height": 80},
            "notice": NOTICE,
        }
    )
    return Pipeline(
        planner=ScriptedVLMBackend([planner_reply], name="planner", repeat_last=True),
        critic=ScriptedVLMBackend([critic_reply], name="critic", repeat_last=True),
        generator=generator or ScriptedImageBackend(),
        config=config,
        templates=builtin_templates(),
    )


def bomb_png(path: Path, side: int) -> Path:
    """A valid one-colour 1-bit PNG of ``side``² pixels, tens of KB on disk (written row by row, so
    the test never holds the pixels): decoding it as RGB would take 3 bytes a pixel."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = bytes(1 + (side + 7) // 8)  # filter byte, then the packed bits of one row
    packer = zlib.compressobj(9)
    body = [packer.compress(row * 1024) for _ in range(side // 1024)]
    body += [packer.compress(row * (side % 1024)), packer.flush()]
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    png = chunk(b"IHDR", header) + chunk(b"IDAT", b"".join(body)) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png)
    return path


BOMB_MESSAGE = "Upload {name} {what}. Send a smaller image (at most 16.8 megapixels per image)."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(app: Any, options: DemoOptions) -> Iterator[str]:
    """Launch on a free local port without blocking; close (and free the port) afterwards."""
    port = free_port()
    app.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        share=False,
        **launch_kwargs(options),
    )
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.close()
        gc.collect()  # Gradio's leftovers are collected here, under this module's warning filter
