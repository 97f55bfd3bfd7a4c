"""Deterministic model servers for tests: an OpenAI-compatible chat server that plans and criticises by
rule, and an "/edit" image server. Run as ``python -m tests.scripted_servers chat|edit PORT``.
Every call is logged and served at ``GET /log`` so tests can count what was (re)computed."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

LATENCY = 0.02


def digest(*parts: str) -> int:
    return int(hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8], 16)


def plan_reply(request: str) -> tuple[str, str]:
    tag = f"r{digest(request) % 100000:05d}"
    steps = 2 + digest(request, "n") % 2
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


def make_handler(kind: str, state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, payload: Any, status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/log":
                with state.lock:
                    self._send(list(state.log))
            elif self.path.endswith("/models"):
                self._send({"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            else:
                self._send({"status": "ok"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(LATENCY)
            if kind == "chat":
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
                self._send(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "model": "scripted",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                )
                return
            source = body.get("image")
            key = hashlib.sha256(base64.b64decode(source)).hexdigest()[:16] if source else "t2i"
            state.add(
                {"role": "generator", "prompt": body["prompt"], "seed": body.get("seed", 0), "source": key}
            )
            value = digest(body["prompt"], str(body.get("seed", 0)), key)
            image = Image.new(
                "RGB",
                (int(body.get("width", 64)), int(body.get("height", 64))),
                (value % 256, value // 256 % 256, 90),
            )
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            self._send({"success": True, "edited_image": base64.b64encode(buffer.getvalue()).decode()})

    return Handler


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(kind, State()))
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
