"""No API key in any output: every remote backend kind against a real 127.0.0.1 server that echoes
every header it receives in its error body, plus the caps on ``Retry-After`` and the default deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.remote import (
    MAX_RETRY_AFTER,
    EndpointPool,
    RemoteCaller,
    RetrySettings,
)
from interleave_thinker.backends.secrets import scrub
from interleave_thinker.core.errors import BackendError
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.helpers.batch import scripted_servers
from tests.helpers.common import REPO

KEY = "sk-test-5ecret-9f27c1d0a8b3"


class EchoServer:
    """Answers every request with ``status`` and an error body quoting all the request's headers;
    a queue of (status, extra headers) pairs is served first."""

    def __init__(self, status: int = 401) -> None:
        self.status = status
        self.script: list[tuple[int, dict[str, str]]] = []
        self.requests = 0
        self.server = LocalServer(self._answer).start()
        self.url = self.server.url

    def _answer(self, request: Request) -> Reply:
        self.requests += 1
        status, extra = self.script.pop(0) if self.script else (self.status, {})
        echoed = dict(request.headers)
        message = f"denied; you sent {echoed} and {json.dumps(echoed)}"
        body = {"error": {"message": message, "code": status, "status": "UNAUTHENTICATED"}}
        return Reply(status, body, extra)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


# --- the scrubber ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"echo {KEY} and {KEY}", "echo *** and ***"),
        ("{'Authorization': 'Bearer other-token-1'}", "{'Authorization': 'Bearer ***'}"),
        ('{"x-goog-api-key": "AIzaOther"}', '{"x-goog-api-key": "***"}'),
        ("api-key: abc123, host: x", "api-key: ***, host: x"),
        ("GET /v1/models?key=AIzaQ&alt=json", "GET /v1/models?key=***&alt=json"),
        ("Check that OPENAI_API_KEY holds a valid key.", "Check that OPENAI_API_KEY holds a valid key."),
    ],
)
def test_scrub_replaces_keys_and_auth_header_values(text: str, expected: str) -> None:
    assert scrub(text, [KEY]) == expected


# --- Retry-After and the default deadline ----------------------------------------------------------
@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        ("inf", MAX_RETRY_AFTER),
        ("1e999", MAX_RETRY_AFTER),
        ("1000000", MAX_RETRY_AFTER),
        ("nan", None),
        ("-5", 0.0),
        ("-inf", None),
        ("soon", None),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER),
        ("2", 2.0),
    ],
)
def test_retry_after_is_capped_and_never_raises(
    echo: EchoServer, retry_after: str, expected: float | None
) -> None:
    echo.script = [(503, {"Retry-After": retry_after})]
    echo.status = 200
    slept: list[float] = []
    retry = RetrySettings(
        max_retries=1, backoff_base=0.0, backoff_max=0.0, jitter=0.0, timeout=5.0, deadline=1000.0
    )
    caller = RemoteCaller("echo", EndpointPool([echo.url]), retry=retry, sleep=slept.append)

    def request(client: Any, url: str, timeout: float) -> int:
        response = client.get(f"{url}/x", timeout=timeout)
        caller.check_status(response)
        return int(response.status_code)

    try:
        assert caller.call(request) == 200
    finally:
        caller.close()
    assert slept == [expected or 0.0]


def test_a_call_has_a_deadline_by_default() -> None:
    retry = RetrySettings(max_retries=2, timeout=10.0, backoff_max=4.0)
    assert retry.deadline is None
    # every try at its timeout plus one second of overhead, and the longest jittered backoff between tries
    assert retry.total_deadline == 3 * (10.0 + 1.0) + 2 * 4.0 * 1.5
    assert RetrySettings(deadline=7.0).total_deadline == 7.0


def test_a_huge_retry_after_ends_at_the_deadline_not_after_it(echo: EchoServer) -> None:
    echo.status = 503
    echo.script = [(503, {"Retry-After": "1000000"})]
    slept: list[float] = []
    retry = RetrySettings(max_retries=3, backoff_base=0.0, jitter=0.0, timeout=5.0, deadline=2.0)
    caller = RemoteCaller("echo", EndpointPool([echo.url]), retry=retry, sleep=slept.append)

    def request(client: Any, url: str, timeout: float) -> None:
        caller.check_status(client.get(f"{url}/x", timeout=timeout))

    with pytest.raises(BackendError, match="HTTP 503"):
        caller.call(request)
    caller.close()
    assert slept and all(0.0 <= s <= 2.0 for s in slept)


# --- every backend kind, through the real CLI ------------------------------------------------------
@pytest.fixture(scope="module")
def scripted() -> Iterator[dict[str, str]]:
    """The scripted planner/critic and "/edit" servers of the batch tests (their own processes)."""
    with scripted_servers() as urls:
        yield urls


def run_cli(out: Path, env: dict[str, str], *specs: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "interleave_thinker", "run", "How to draw a cat?", "--preset", "tiny"]
    command += [*specs, "--out", str(out), "--max-attempts", "2"]
    clean = {k: v for k, v in os.environ.items() if "API_KEY" not in k and "BASE_URL" not in k}
    return subprocess.run(
        command, capture_output=True, text=True, env={**clean, **env}, timeout=240, cwd=REPO
    )


def assert_no_key(out: Path, done: subprocess.CompletedProcess[str]) -> list[Path]:
    files = [p for p in out.rglob("*") if p.is_file()]
    for path in files:
        assert KEY.encode() not in path.read_bytes(), f"the key leaked into {path}"
    assert KEY not in done.stderr, done.stderr
    assert KEY not in done.stdout
    return files


CASES = {
    "http": ("INTERLEAVE_THINKER_GENERATOR_API_KEY", "--generator", "http:{echo}"),
    "openai-images": ("OPENAI_API_KEY", "--generator", "openai-images:gpt-image-1@{echo}/v1"),
    "openai": ("OPENAI_API_KEY", "--critic", "openai:{echo}/v1#critic"),
    "gemini": ("GEMINI_API_KEY", "--critic", "gemini:gemini-2.5-pro"),
    "gemini-image": ("GEMINI_API_KEY", "--generator", "gemini-image:nano-banana"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CASES))
def test_no_key_in_any_output_or_on_stderr(
    kind: str, echo: EchoServer, scripted: dict[str, str], tmp_path: Path
) -> None:
    if kind.startswith("gemini"):
        pytest.importorskip("google.genai")
    env_name, flag, spec = CASES[kind]
    echo.script = [(500, {})]  # one retryable failure (logged and retried), then 401s
    chosen = {
        "--planner": f"openai:{scripted['chat']}/v1#scripted",
        "--critic": f"openai:{scripted['chat']}/v1#scripted",
        "--generator": f"http:{scripted['edit']}",
        flag: spec.format(echo=echo.url),
    }
    specs = [item for pair in chosen.items() for item in pair]
    env = {env_name: KEY, "GOOGLE_GEMINI_BASE_URL": echo.url}
    out = tmp_path / "run"
    done = run_cli(out, env, *specs)
    assert echo.requests >= 2, done.stderr  # the key was sent, and the server echoed it back
    files = assert_no_key(out, done)
    if kind in ("openai", "gemini"):  # a failed critic does not end the run: its error is in the pages
        assert done.returncode == 0, done.stderr
        names = {p.name for p in files}
        assert {"trace.json", "index.html", "document.md"} <= names
        assert "***" in (out / "trace.json").read_text()
    else:
        assert done.returncode == 1, done.stderr
        assert "***" in done.stderr


# --- the Gemini SDK's error path, without the SDK (it is an optional extra) -----------------------
class EchoingSDKError(Exception):
    """Shaped like ``google.genai.errors.APIError``: an HTTP ``code`` and the server's ``message``."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.message = f"denied; you sent {{'x-goog-api-key': '{KEY}'}} for key={KEY}"
        super().__init__(f"{code} UNAUTHENTICATED. {self.message}")


class EchoingModels:
    def __init__(self, codes: list[int]) -> None:
        self.codes = codes

    def generate_content(self, **_: Any) -> Any:
        raise EchoingSDKError(self.codes.pop(0) if len(self.codes) > 1 else self.codes[0])


class EchoingClient:
    def __init__(self, codes: list[int]) -> None:
        self.models = EchoingModels(codes)


def chain_text(exc: BaseException | None) -> str:
    texts = []
    while exc is not None:
        texts.append(f"{exc!r} {exc}")
        exc = exc.__cause__ or exc.__context__
    return " ".join(texts)


@pytest.mark.parametrize("codes", [[401], [500, 401], [500]], ids=["final", "retried-then-final", "retries"])
@pytest.mark.parametrize("kind", ["gemini", "gemini-image"])
def test_gemini_sdk_errors_are_scrubbed(kind: str, codes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    from interleave_thinker.backends.image.gemini_image_backend import GeminiImageBackend
    from interleave_thinker.backends.vlm.gemini_backend import GeminiVLMBackend
    from interleave_thinker.core.config import RemoteOptions

    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    fast = RemoteOptions(max_retries=1, backoff_base=0.0, backoff_max=0.0)
    with pytest.raises(BackendError) as info:
        if kind == "gemini":
            retry = RetrySettings.from_options(fast)
            GeminiVLMBackend("m", client=EchoingClient(codes), retry=retry).chat(
                [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
            )
        else:
            GeminiImageBackend("m", client=EchoingClient(codes), remote=fast).generate(ImageRequest("p"))
    text = chain_text(info.value)
    assert KEY not in text
    assert "***" in str(info.value)
