"""The openai: backend against small scripted OpenAI-compatible servers on 127.0.0.1 (real HTTP,
:mod:`interleave_thinker.testing.doubles.openai_chat`)."""

from __future__ import annotations

import base64
import io
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PIL import Image

from interleave_thinker.agents.critic import parse_verdict
from interleave_thinker.agents.planner import parse_plan
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.testing.doubles.openai_chat import Call, Reply, Script, ScriptedServer, ok

FAST = RetrySettings(max_retries=3, backoff_base=0.01, backoff_max=0.05, timeout=5.0)
SECRET = "sk-test-4f9c1d-secret"


@pytest.fixture
def serve() -> Iterator[Callable[[Script], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script) -> ScriptedServer:
        servers.append(ScriptedServer(script).__enter__())
        return servers[-1]

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture
def backends() -> Iterator[Callable[..., OpenAIVLMBackend]]:
    made: list[OpenAIVLMBackend] = []

    def make(*args: Any, **kwargs: Any) -> OpenAIVLMBackend:
        kwargs.setdefault("retry", FAST)
        made.append(OpenAIVLMBackend(*args, **kwargs))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


def dead_url() -> str:
    """A port nobody listens on: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


def decode(url: str) -> Image.Image:
    header, _, payload = url.partition(",")
    assert header == "data:image/png;base64"
    image = Image.open(io.BytesIO(base64.b64decode(payload)))
    assert image.format == "PNG"
    return image


# -- request shape ------------------------------------------------------------------------------


def test_request_body_and_reply(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: ok("  the answer \n"))
    backend = backends(server.url, "planner")
    reply = backend.chat(user("hi"), max_new_tokens=17, temperature=0)
    assert reply == "the answer"
    [call] = server.calls
    assert (call.method, call.path) == ("POST", "/v1/chat/completions")
    assert call.body == {
        "model": "planner",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 17,
        "temperature": 0,
    }
    assert backend.name == f"openai:{server.url}#planner"


def test_images_travel_as_png_data_urls_bounded_by_max_pixels(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: ok("seen"))
    small = Image.effect_noise((64, 48), 60).convert("RGB")
    big = Image.new("RGB", (1000, 800), (200, 10, 30))
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": small},
                {"type": "text", "text": "and"},
                {"type": "image", "image": big, "max_pixels": 256 * 256},
            ],
        },
    ]
    assert backends(server.url, "m").chat(messages) == "seen"
    sent = server.calls[0].body["messages"]
    assert sent[0] == {"role": "system", "content": "be brief"}
    kinds = [p["type"] for p in sent[1]["content"]]
    assert kinds == ["image_url", "text", "image_url"]
    first = decode(sent[1]["content"][0]["image_url"]["url"])
    assert first.size == (64, 48)
    assert first.convert("RGB").tobytes() == small.tobytes()  # PNG is lossless
    second = decode(sent[1]["content"][2]["image_url"]["url"])
    width, height = second.size
    assert width * height <= 256 * 256
    assert (width % 32, height % 32) == (0, 0)
    assert (width, height) == (256, 224)  # 1000x800 scaled by sqrt(65536/800000), floored to 32
    assert second.convert("RGB").getpixel((10, 10)) == (200, 10, 30)


def test_default_bound_applies_to_images_without_max_pixels(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: ok("x"))
    backend = backends(server.url, "m", default_max_pixels=64 * 64)
    backend.chat([{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (300, 300))}]}])
    image = decode(server.calls[0].body["messages"][0]["content"][0]["image_url"]["url"])
    assert image.size == (64, 64)


def test_chat_batch_keeps_order(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: ok("re:" + call.body["messages"][0]["content"][0]["text"]))
    replies = backends(server.url, "m").chat_batch([user(str(n)) for n in range(6)])
    assert replies == [f"re:{n}" for n in range(6)]
    assert len(server.calls) == 6


# -- model discovery ----------------------------------------------------------------------------


def test_model_discovered_once_from_v1_models(serve: Any, backends: Any) -> None:
    def script(i: int, call: Call) -> Reply:
        if call.path == "/v1/models":
            return Reply(200, {"object": "list", "data": [{"id": "served-planner", "object": "model"}]})
        return ok("fine")

    server = serve(script)
    backend = backends(server.url)
    assert backend.name.endswith("#?")
    assert backend.chat(user("a")) == "fine"
    assert backend.chat(user("b")) == "fine"
    assert [c.path for c in server.calls] == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]
    assert [c.body["model"] for c in server.posts()] == ["served-planner", "served-planner"]
    assert backend.name == f"openai:{server.url}#served-planner"


def test_discovery_failure_names_the_url(backends: Any) -> None:
    url = dead_url()
    backend = backends(url, retry=RetrySettings(max_retries=1, backoff_base=0.01, timeout=2))
    with pytest.raises(BackendError) as info:
        backend.chat(user("a"))
    assert f"GET {url}/models" in str(info.value)
    assert "openai:URL#MODEL" in str(info.value)


def test_discovery_of_an_empty_model_list_is_an_error(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: Reply(200, {"object": "list", "data": []}))
    with pytest.raises(BackendError, match="lists no model"):
        backends(server.url).chat(user("a"))
    assert len(server.calls) == 1


# -- pool ---------------------------------------------------------------------------------------


def test_dead_endpoint_is_skipped_during_its_cooldown(serve: Any, backends: Any) -> None:
    down = serve(lambda i, call: Reply(503, {"error": {"message": "overloaded"}}))
    up = serve(lambda i, call: ok("from up"))
    backend = backends([down.url, up.url], "m", cooldown=30.0)
    assert [backend.chat(user(str(n))) for n in range(4)] == ["from up"] * 4
    assert len(down.calls) == 1  # tried once, then skipped
    assert len(up.calls) == 4


def test_endpoint_is_tried_again_after_its_cooldown(serve: Any, backends: Any) -> None:
    down = serve(lambda i, call: Reply(503, {"error": {"message": "overloaded"}}))
    up = serve(lambda i, call: ok("from up"))
    backend = backends([down.url, up.url], "m", cooldown=0.3)
    backend.chat(user("1"))
    backend.chat(user("2"))
    assert (len(down.calls), len(up.calls)) == (1, 2)
    time.sleep(0.4)
    backend.chat(user("3"))
    assert (len(down.calls), len(up.calls)) == (2, 3)


def test_refused_connections_fail_over_to_the_live_server(serve: Any, backends: Any) -> None:
    up = serve(lambda i, call: ok("alive"))
    backend = backends([dead_url(), up.url], "m")
    assert [backend.chat(user(str(n))) for n in range(3)] == ["alive"] * 3
    assert len(up.calls) == 3


# -- retries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 429, 408])
def test_retryable_status_then_success(serve: Any, backends: Any, status: int) -> None:
    k = 2
    server = serve(lambda i, call: Reply(status, {"error": {"message": "busy"}}) if i < k else ok("done"))
    assert backends(server.url, "m").chat(user("x")) == "done"
    assert len(server.calls) == k + 1


def test_persistent_5xx_gives_up_after_max_retries(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: Reply(500, {"error": {"message": "boom inside"}}))
    with pytest.raises(BackendError) as info:
        backends(server.url, "m").chat(user("x"))
    assert len(server.calls) == FAST.max_retries + 1
    assert "4 tries failed" in str(info.value)
    assert "HTTP 500: boom inside" in str(info.value)


def test_timeout_is_retried_then_reported(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: Reply(200, {"choices": []}, delay=2.0))
    retry = RetrySettings(max_retries=1, backoff_base=0.01, timeout=0.25)
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        backends(server.url, "m", retry=retry).chat(user("x"))
    assert len(server.calls) == 2
    assert "timed out after 0.25s" in str(info.value)
    assert time.monotonic() - start < 1.5


def test_total_deadline_bounds_a_call(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: Reply(200, {"choices": []}, delay=3.0))
    retry = RetrySettings(max_retries=10, backoff_base=0.01, timeout=5.0, deadline=0.4)
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"deadline of 0\.4s passed"):
        backends(server.url, "m", retry=retry).chat(user("x"))
    assert time.monotonic() - start < 1.5
    assert len(server.calls) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"<html>proxy error</html>",
        {"choices": []},
        {"choices": [{"message": {"role": "assistant", "content": None}}]},
        {"object": "error"},
    ],
    ids=["html", "no-choices", "null-content", "no-message"],
)
def test_garbage_bodies_are_retried_then_fail(serve: Any, backends: Any, body: Any) -> None:
    server = serve(lambda i, call: Reply(200, body))
    with pytest.raises(BackendError, match=r"reply without choices\[0\]\.message\.content"):
        backends(server.url, "m").chat(user("x"))
    assert len(server.calls) == FAST.max_retries + 1


def test_garbage_then_good_reply_succeeds(serve: Any, backends: Any) -> None:
    server = serve(lambda i, call: Reply(200, b"not json") if i == 0 else ok("good"))
    assert backends(server.url, "m").chat(user("x")) == "good"
    assert len(server.calls) == 2


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (400, {"error": {"message": "max_tokens is too large: 99999"}}, "max_tokens is too large: 99999"),
        (
            404,
            {"object": "error", "message": "The model `x` does not exist."},
            "The model `x` does not exist.",
        ),
        (422, {"detail": "bad field"}, "bad field"),
    ],
)
def test_client_errors_are_not_retried(
    serve: Any, backends: Any, status: int, body: dict[str, Any], message: str
) -> None:
    server = serve(lambda i, call: Reply(status, body))
    with pytest.raises(BackendError) as info:
        backends(server.url, "m").chat(user("x"))
    assert len(server.calls) == 1
    assert f"HTTP {status}" in str(info.value)
    assert message in str(info.value)


# -- API key ------------------------------------------------------------------------------------


def test_api_key_sent_as_bearer_and_never_kept(
    serve: Any, backends: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server = serve(lambda i, call: ok("authorized"))
    backend = backends(server.url, "m")
    assert backend.chat(user("x")) == "authorized"
    assert server.calls[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(vars(backend))
    assert "authorization" not in backend.caller.client.headers


def test_no_key_no_header(serve: Any, backends: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(lambda i, call: ok("open"))
    backends(server.url, "m").chat(user("x"))
    assert "Authorization" not in server.calls[0].headers


def test_key_never_appears_in_errors(serve: Any, backends: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    def echo(i: int, call: Call) -> Reply:  # a hostile server that echoes the credentials back
        status = 500 if i == 0 else 401
        return Reply(status, {"error": {"message": f"bad credentials {call.headers['Authorization']}"}})

    server = serve(echo)
    with pytest.raises(BackendError) as info:
        backends(server.url, "m").chat(user("x"))
    assert len(server.calls) == 2
    assert "HTTP 401" in str(info.value)
    assert "bad credentials Bearer ***" in str(info.value)
    assert SECRET not in str(info.value)


def test_api_key_env_from_options(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VLLM_KEY", "k-123")
    server = serve(lambda i, call: ok("yes"))
    options = BackendOptions(remote=RemoteOptions(api_key_env="MY_VLLM_KEY", backoff_base=0.01))
    backend = load_vlm_backend(f"openai:{server.url}#m", options)
    try:
        assert backend.chat(user("x")) == "yes"
    finally:
        backend.close()  # type: ignore[attr-defined]
    assert server.calls[0].headers["Authorization"] == "Bearer k-123"


def test_unset_api_key_env_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_VLLM_KEY", raising=False)
    options = BackendOptions(remote=RemoteOptions(api_key_env="MY_VLLM_KEY"))
    with pytest.raises(ConfigError, match="MY_VLLM_KEY"):
        load_vlm_backend("openai:http://127.0.0.1:9/v1#m", options)


# -- spec ---------------------------------------------------------------------------------------


def test_spec_with_pool_model_and_options() -> None:
    options = BackendOptions(
        remote=RemoteOptions(
            timeout=12, max_retries=2, backoff_base=0.1, deadline=60, concurrency=3, cooldown=5
        )
    )
    backend = load_vlm_backend("openai:http://a:8000/v1, http://b:9000/#planner", options)
    assert isinstance(backend, OpenAIVLMBackend)
    try:
        assert backend.pool.urls == ["http://a:8000/v1", "http://b:9000/v1"]
        assert backend.model == "planner"
        assert backend.pool.cooldown == 5
        assert backend.caller.retry == RetrySettings(
            max_retries=2, backoff_base=0.1, backoff_max=8.0, timeout=12, deadline=60
        )
        assert backend.concurrency == 3
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("#planner", "has no base URL"),
        ("ftp://host/v1#m", "not an http(s) URL"),
        ("host:8000#m", "not an http"),
    ],
)
def test_bad_specs(target: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_vlm_backend(f"openai:{target}")


# -- the reply the model wrote (issue 29) ----------------------------------------------------------

THINK = "Three image steps."
ANSWER = "<answer>\n{'previous_step_success': True, 'refine_prompt': 'a red cat'}\n</answer>"
WRITTEN = f"<think>\n{THINK}\n</think>\n{ANSWER}"
"""What the tiny critic writes, and so what a local ``transformers:`` run's raw reply holds."""


def message_reply(message: dict[str, Any]) -> Reply:
    """A chat completion around one ``message``, as the engines shape it."""
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "critic",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 30, "total_tokens": 39},
    }
    return Reply(200, body)


ENGINE_MESSAGES: dict[str, dict[str, Any]] = {
    # transformers serve 5.24 (cli/serving/chat_completion.py): both parts stripped, tool_calls left out.
    "transformers-serve": {"content": ANSWER, "role": "assistant", "reasoning_content": THINK},
    # vLLM before the rename, --reasoning-parser qwen3: the text on either side of </think>, unstripped.
    "vllm-reasoning_content": {
        "role": "assistant",
        "content": "\n" + ANSWER,
        "reasoning_content": f"\n{THINK}\n",
        "tool_calls": [],
    },
    # vLLM since the rename (`reasoning`), its other message fields null.
    "vllm-reasoning": {
        "role": "assistant",
        "content": "\n" + ANSWER,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [],
        "reasoning": f"\n{THINK}\n",
    },
    # vLLM during the deprecation window: both fields, the same text.
    "vllm-both-fields": {
        "role": "assistant",
        "content": "\n" + ANSWER,
        "reasoning": f"\n{THINK}\n",
        "reasoning_content": f"\n{THINK}\n",
    },
    # SGLang --reasoning-parser qwen3.
    "sglang": {"role": "assistant", "content": ANSWER, "reasoning_content": THINK, "tool_calls": None},
    # No parser (vLLM without --reasoning-parser, our serve vlm): the block inline, reasoning null.
    "inline": {"role": "assistant", "content": WRITTEN, "reasoning": None, "reasoning_content": None},
    # A parser on and the block inline as well: kept as sent, never doubled.
    "inline-and-field": {"role": "assistant", "content": WRITTEN, "reasoning_content": THINK},
}


@pytest.mark.parametrize("engine", sorted(ENGINE_MESSAGES))
def test_split_reasoning_is_put_back_as_the_model_wrote_it(serve: Any, backends: Any, engine: str) -> None:
    server = serve(lambda i, call: message_reply(ENGINE_MESSAGES[engine]))
    reply = backends(server.url, "critic").chat(user("check"))
    assert reply == WRITTEN
    verdict = parse_verdict(reply)
    assert (verdict.reasoning, verdict.success, verdict.refine_prompt) == (THINK, True, "a red cat")


def test_reply_cut_inside_its_think_block_keeps_the_reasoning(serve: Any, backends: Any) -> None:
    """vLLM sends null content when nothing follows </think> (a reply cut at max_tokens, say)."""
    message = {"role": "assistant", "content": None, "reasoning": f"\n{THINK}\n"}
    server = serve(lambda i, call: message_reply(message))
    assert backends(server.url, "m").chat(user("x")) == f"<think>\n{THINK}\n</think>"
    assert len(server.calls) == 1


@pytest.mark.parametrize("blank", ["", "  \n", None])
def test_blank_reasoning_leaves_the_content(serve: Any, backends: Any, blank: str | None) -> None:
    message = {"role": "assistant", "content": " " + ANSWER + "\n", "reasoning_content": blank}
    server = serve(lambda i, call: message_reply(message))
    assert backends(server.url, "m").chat(user("x")) == ANSWER


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [("reasoning_content", ["a"], "list"), ("reasoning", {"text": "a"}, "dict"), ("content", 7, "int")],
)
def test_reasoning_or_content_that_is_not_text_is_a_malformed_reply(
    serve: Any, backends: Any, field: str, value: Any, kind: str
) -> None:
    message = {"role": "assistant", "content": ANSWER, field: value}
    server = serve(lambda i, call: message_reply(message))
    with pytest.raises(
        BackendError, match=rf"reply with choices\[0\]\.message\.{field} of type {kind}, not text"
    ):
        backends(server.url, "m").chat(user("x"))
    assert len(server.calls) == FAST.max_retries + 1


def test_planner_reasoning_survives_a_split_reply(serve: Any, backends: Any) -> None:
    plan = (
        "<answer>\n{'execution_plan': [{'step_number': 1, 'step_name': 'Sketch', 'instruction': 'Sketch.', "
        "'prompt': 'sketch a cat', 'auxiliary_text': None}]}\n</answer>"
    )
    server = serve(
        lambda i, call: message_reply({"role": "assistant", "content": plan, "reasoning": "One step."})
    )
    reply = backends(server.url, "planner").chat(user("plan"))
    assert reply == f"<think>\nOne step.\n</think>\n{plan}"
    assert parse_plan(reply).reasoning == "One step."
