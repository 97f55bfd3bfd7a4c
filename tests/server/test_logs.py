"""No key in any log line of a service, wherever a client puts it: a real ``serve vlm`` app under the
command's own uvicorn set-up (``run_server``, at ``--log-level trace``: every request line and header
logged), in a subprocess whose whole output is read: request lines, scopes (query strings), errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from interleave_thinker.server.generator import free_port

KEY = "sk-served-7Qe2-secret"
OTHER = "sk-someone-elses-4Zt9"
PROGRAM = """
import os, sys
from interleave_thinker.cli.serve_vlm import run_server
from interleave_thinker.server.vlm_service import create_app

class Echo:
    name = "echo"
    def chat(self, messages, **options):
        return "heard " + "".join(p["text"] for m in messages for p in m["content"] if p["type"] == "text")
    def chat_batch(self, conversations, **options):
        return [self.chat(c) for c in conversations]

key = os.environ["IT_LOG_TEST_KEY"]
run_server(create_app(Echo(), "echo", api_key=key), host="127.0.0.1", port=int(sys.argv[1]),
           log_level="trace", read_timeout=30.0, api_key=key)
"""


def wait_until_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited"
        try:
            httpx.get(f"{url}/health", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server did not start")


def test_no_key_reaches_the_log_from_the_query_path_headers_or_body() -> None:
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "IT_LOG_TEST_KEY": KEY}
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_until_up(url, process)
        bearer = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=url, timeout=30) as client:
            statuses = [
                client.get(f"/v1/models?api_key={KEY}").status_code,  # as some SDKs send it
                client.get(f"/v1/models?key={KEY}&x=1", headers=bearer).status_code,
                client.get(f"/v1/{KEY}/models", headers=bearer).status_code,
                client.get("/v1/models", headers={"Authorization": f"Bearer {OTHER}"}).status_code,
                client.get("/v1/models", headers={**bearer, "X-Api-Key": KEY}).status_code,
                client.post(
                    "/v1/chat/completions",
                    headers=bearer,
                    json={"messages": [{"role": "user", "content": f"my key is {KEY}"}]},
                ).status_code,
            ]
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0].decode("utf-8", "replace")
    assert statuses == [401, 200, 404, 401, 200, 200]
    assert '"GET /v1/models?<redacted> HTTP/1.1" 401' in output, output[-3000:]  # request lines are logged
    assert "query_string': b'api_key=***'" in output  # the ASGI scope, at trace
    assert "--- Logging error ---" not in output
    assert KEY not in output and OTHER not in output, output[-3000:]
