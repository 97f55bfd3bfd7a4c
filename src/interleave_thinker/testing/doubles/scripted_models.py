"""Deterministic model servers: an OpenAI-compatible chat server that plans and criticises by rule, and a
generator speaking the "/edit" protocol. Run as
``python -m interleave_thinker.testing.doubles.scripted_models chat|edit PORT`` (prints ``ready``).

Every call is logged and served at ``GET /log`` so tests can count what was (re)computed; the replies
depend only on the request, so a resumed or repeated batch gets the same answers.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import threading
import time
from typing import Any

from PIL import Image

from interleave_thinker.testing.doubles.generator import png_b64
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request

LATENCY = 0.02


def digest(*parts: str) -> int:
    return int(hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8], 16)


def plan_reply(request: str, steps: int | None = None) -> tuple[str, str]:
    """A plan of ``steps`` image steps (without it, 2 or 3 by the request's digest) and the request's tag."""
    tag = f"r{digest(request) % 100000:05d}"
    steps = steps or 2 + digest(request, "n") % 2
    items = ", ".join(
        f"{{'step_number': {i}, 'step_name': 'S{i}', 'instruction': 'do {i}', 'prompt': '{tag} step {i}', "
        f"'auxiliary_text': {('None' if i != steps else repr('done ' + tag))}}}"
        for i in range(1, steps + 1)
    )
    return f"<think>plan</think><answer>{{'execution_plan': [{items}]}}</answer>", tag


def critic_reply(original: str, rewritten: str) -> tuple[str, str]:
    ok = rewritten.endswith("refined") or digest(original) % 3 != 0
    refine = rewritten if ok else rewritten + " refined"
    return (
        f"<think>c</think><answer>{{'previous_step_success': {ok}, 'refine_prompt': {refine!r}}}</answer>",
        original,
    )


class State:
    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.log.append(entry)


def text_of(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def chat_reply(body: dict[str, Any], state: State) -> dict[str, Any]:
    """A plan when the prompt carries a user request, else a verdict: the OpenAI chat completion shape."""
    text = text_of(body)
    request = re.search(r'User request: "(.*?)"\n', text, re.DOTALL)
    if request is not None:
        reply, key = plan_reply(request.group(1))
        state.add({"role": "planner", "key": request.group(1)})
    else:
        original = re.search(r'meant to achieve: "(.*?)"\n', text, re.DOTALL)
        rewritten = re.search(
            r'image model \(if empty, rely only on the line above\): "(.*?)"\n', text, re.DOTALL
        )
        assert original and rewritten, text[:200]
        reply, key = critic_reply(original.group(1), rewritten.group(1))
        state.add({"role": "critic", "key": key, "rewritten": rewritten.group(1)})
    message = {"role": "assistant", "content": reply}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "x", "object": "chat.completion", "model": "scripted", "choices": [choice]}


def edit_reply(body: dict[str, Any], state: State) -> dict[str, Any]:
    """A flat colour derived from prompt, seed and source image: the "/edit" protocol's reply."""
    source = body.get("image")
    key = hashlib.sha256(base64.b64decode(source)).hexdigest()[:16] if source else "t2i"
    state.add({"role": "generator", "prompt": body["prompt"], "seed": body.get("seed", 0), "source": key})
    value = digest(body["prompt"], str(body.get("seed", 0)), key)
    size = (int(body.get("width", 64)), int(body.get("height", 64)))
    image = Image.new("RGB", size, (value % 256, value // 256 % 256, 90))
    return {"success": True, "edited_image": png_b64(image)}


def handler(kind: str, state: State) -> Any:
    """The request handler of a ``chat`` or ``edit`` server over ``state``."""

    def handle(request: Request) -> Reply:
        if request.method == "GET":
            if request.path == "/log":
                with state.lock:
                    return Reply(body=list(state.log))
            if request.path.endswith("/models"):
                return Reply(body={"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            return Reply(body={"status": "ok"})
        time.sleep(LATENCY)
        return Reply(body=(chat_reply if kind == "chat" else edit_reply)(request.json(), state))

    return handle


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    server = LocalServer(handler(kind, State()), port=port)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
