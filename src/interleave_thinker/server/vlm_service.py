"""A small OpenAI-compatible chat server over any :class:`VLMBackend`, for CPU users and tests.

vLLM (``vllm serve CHECKPOINT``) is the production server: batching, paged attention, GPUs. This one
exists so that the ``openai:`` backend, and any tool that speaks chat completions, can be pointed at
a local transformers model or the tiny models with nothing else installed. It runs one model, one
call at a time (a lock), and accepts images only as base64 ``data:`` URLs: it never fetches URLs.
``stream: true`` answers with Server-Sent Events (:mod:`~interleave_thinker.server.vlm_stream`); with
an API key (``--api-key-env``) every route but ``/health`` wants ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from interleave_thinker.backends.protocols import MAX_NEW_TOKENS, Message, VLMBackend
from interleave_thinker.core.errors import BackendError, InputError
from interleave_thinker.server.auth import UNAUTHORIZED, BearerAuth
from interleave_thinker.server.cancel import CallGate, Generated, install_stop_check, take_generated
from interleave_thinker.server.limits import Admission, BodyLimit
from interleave_thinker.server.prometheus import PREFIX, CountFrom, HTTPMetrics, RequestMetrics, metrics_reply
from interleave_thinker.server.settings import VLMLimits
from interleave_thinker.server.vlm_errors import RequestError, error_body, failure_body
from interleave_thinker.server.vlm_messages import (
    ChatMessage,
    decode_images,
    to_project_messages,
)
from interleave_thinker.server.vlm_stream import StreamJob, events, token_streamer, tokenizer_of

DISCONNECT_POLL_S = 0.25
CHAT_PATH = "/v1/chat/completions"
OPEN_PATHS = frozenset({"/health"})
"""Routes answered without the bearer token: a load balancer's probe carries none."""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False
    """A last chunk with ``choices: []`` and the ``usage``, before ``[DONE]``."""


class ChatRequest(BaseModel):
    """The chat-completions fields we honour; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description="Omitted means the checkpoint's own generation config, as vLLM and the local backend do.",
    )
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None


def create_app(
    backend: VLMBackend, served_name: str, limits: VLMLimits | None = None, api_key: str | None = None
) -> FastAPI:
    """The app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``, ``GET /metrics``;
    with ``api_key``, every route but ``/health`` answers 401 without ``Authorization: Bearer api_key``."""
    limits = limits or VLMLimits()
    app = FastAPI(title="interleave-thinker VLM server", version="1")
    gate = CallGate()
    tokens = _add_guards(app, gate, limits, api_key)
    app.state.gate = gate
    app.state.cancellable = install_stop_check(backend, gate.should_stop, gate.streamer)
    created = int(time.time())

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "cancelled": gate.cancelled}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": served_name, "object": "model", "created": created, "owned_by": "interleave-thinker"}
        return {"object": "list", "data": [card]}

    @app.post(CHAT_PATH, response_model=None)
    async def chat_completions(
        body: ChatRequest, request: Request
    ) -> dict[str, Any] | JSONResponse | StreamingResponse:
        max_tokens = _checked_max_tokens(body, served_name, limits)
        # Headers only here (count, size, format); the pixels are decoded in the call, one call at a time.
        messages = await asyncio.to_thread(
            to_project_messages, body.messages, limits.max_pixels, limits.max_images
        )
        temperature = body.temperature
        counted: list[Generated | None] = [None]

        def call() -> str:
            take_generated()  # a count left on this worker thread by an earlier call is not this one's
            decoded = decode_images(messages)
            text = backend.chat(decoded, max_new_tokens=max_tokens, temperature=temperature)
            counted[0] = take_generated()
            return text

        settle = functools.partial(_settle, backend, messages, tokens, max_tokens, counted)

        if body.stream:  # the checks above answered in JSON; from here on, errors go in the stream
            job = StreamJob(
                gate=gate,
                call=call,
                served_name=served_name,
                settle=settle,
                streamer=lambda push: token_streamer(backend, push) if app.state.cancellable else None,
                include_usage=body.stream_options is not None and body.stream_options.include_usage,
            )
            return _event_stream(job, request)
        text = await _run_while_connected(gate, call, request)
        if text is None:  # the client left: nobody reads this reply
            return _error(499, "The client closed the connection; generation was stopped.", "cancelled")
        usage, finish = settle(text)
        return _completion(served_name, text, usage, finish)

    return app


def _add_guards(app: FastAPI, gate: CallGate, limits: VLMLimits, api_key: str | None) -> Counter:
    """The middleware, outermost last: metrics, the bearer token, admission, the body limit; the error
    handlers. Returns the token counter the chat route feeds."""
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes, reply=lambda size: _too_large(size, limits))
    # before the body is read: a refused request costs its headers only
    app.add_middleware(Admission, path=CHAT_PATH, capacity=1 + limits.max_waiting, reply=lambda: _busy(gate))
    if api_key is not None:  # outside the body limit (no body read), inside the metrics (401s counted)
        app.add_middleware(BearerAuth, api_key=api_key, reply=_unauthorized, open_paths=OPEN_PATHS)
    _add_error_handlers(app)
    return _add_metrics(app, gate)


def _settle(
    backend: VLMBackend,
    messages: list[Message],
    tokens: Counter,
    max_tokens: int,
    counted: list[Generated | None],
    text: str,
) -> tuple[dict[str, int] | None, str]:
    """A finished reply's usage (counted into the token metric) and finish reason: from the ids a local
    model read and wrote (``counted``), as vLLM counts them; else (a backend without a local model) a
    best-effort count of the texts."""
    generated = counted[0]
    if generated is not None:
        usage: dict[str, int] | None = _usage_of(generated.prompt_tokens, generated.completion_tokens)
        finish = "stop" if generated.ended or generated.completion_tokens < max_tokens else "length"
    else:
        usage = _usage(backend, messages, text)
        finish = _finish_reason(usage, max_tokens)
    if usage is not None:
        tokens.labels("prompt").inc(usage["prompt_tokens"])
        tokens.labels("completion").inc(usage["completion_tokens"])
    return usage, finish


def _checked_max_tokens(body: ChatRequest, served_name: str, limits: VLMLimits) -> int:
    """The request's token budget, after the checks that answer in JSON whether or not it streams."""
    if body.model is not None and body.model != served_name:
        raise RequestError(
            404, f"The model `{body.model}` does not exist; this server serves `{served_name}`."
        )
    if body.stream_options is not None and not body.stream:
        raise RequestError(400, "stream_options: only allowed with stream=true; drop it or set stream.")
    max_tokens = (
        body.max_completion_tokens or body.max_tokens or min(MAX_NEW_TOKENS, limits.max_tokens)
    )  # none asked: the agents' default
    if max_tokens > limits.max_tokens:
        raise RequestError(
            400,
            f"max_tokens: {max_tokens} is over this server's limit of {limits.max_tokens} "
            "(serve vlm --max-tokens); ask for fewer.",
        )
    return max_tokens


def _event_stream(job: StreamJob, request: Request) -> StreamingResponse:
    return StreamingResponse(
        events(job, request), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def _add_metrics(app: FastAPI, gate: CallGate) -> Counter:
    """``GET /metrics`` on the app's own registry (two apps in one process keep separate figures):
    requests by route and status (413s included: the middleware is outermost), latency, in flight,
    generations stopped by a client leaving, and the token counter the chat route feeds."""
    registry = CollectorRegistry()
    app.add_middleware(RequestMetrics, metrics=HTTPMetrics(registry))
    registry.register(
        CountFrom(
            f"{PREFIX}vlm_cancelled", "Generations stopped because the client left.", lambda: gate.cancelled
        )
    )

    @app.get("/metrics")
    async def metrics() -> Response:
        return metrics_reply(registry)

    return Counter(
        f"{PREFIX}vlm_tokens",
        "Tokens of answered chat completions (prompts with their template and image tokens).",
        ["kind"],
        registry=registry,
    )


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal and failure as an OpenAI-shaped error, so OpenAI clients (and ours) show it."""

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return _error(exc.status, str(exc), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return _error(400, f"Invalid request: {problems}", "invalid_request_error")

    @app.exception_handler(InputError)
    async def _input(request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(status_code=400, content=failure_body(exc))

    @app.exception_handler(BackendError)
    async def _failed(request: Request, exc: BackendError) -> JSONResponse:
        return JSONResponse(status_code=500, content=failure_body(exc))

    @app.exception_handler(Exception)
    async def _crashed(request: Request, exc: Exception) -> JSONResponse:
        """Anything else (a tokenizer's TypeError...) in the same shape, not Starlette's text/plain."""
        return JSONResponse(status_code=500, content=failure_body(exc))


async def _run_while_connected(gate: CallGate, call: Any, request: Request) -> str | None:
    """``call`` in a worker thread, one at a time; a client that disconnects (or a server shutting
    down) sets the call's flag, which frees the queue and stops a local model at its next token."""
    gone = threading.Event()
    job = asyncio.ensure_future(asyncio.to_thread(gate.run, gone, call))
    try:
        while not job.done():
            await asyncio.wait({job}, timeout=DISCONNECT_POLL_S)
            if not job.done() and not gone.is_set() and await request.is_disconnected():
                gone.set()
                gate.cancelled += 1
        text = job.result()
    finally:
        gone.set()  # also on cancellation (graceful shutdown timed out): stop the model
    return None if text is None or (gone.is_set() and await request.is_disconnected()) else text


def _finish_reason(usage: dict[str, int] | None, max_tokens: int) -> str:
    return "length" if usage is not None and usage["completion_tokens"] >= max_tokens else "stop"


def _completion(served_name: str, text: str, usage: dict[str, int] | None, finish: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": served_name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": usage,
    }


def _usage_of(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _usage(backend: VLMBackend, messages: list[Message], text: str) -> dict[str, int] | None:
    """Best effort, for a backend without a local model: the texts' tokens by the backend's tokenizer
    (neither the chat template nor images counted)."""
    tokenizer = tokenizer_of(backend)
    if tokenizer is None:
        return None
    try:
        prompt = "".join(p["text"] for m in messages for p in m["content"] if p["type"] == "text")
        prompt_tokens = len(tokenizer(prompt)["input_ids"])
        completion_tokens = len(tokenizer(text)["input_ids"])
    except Exception:  # usage is informative only; never fail a reply over it
        return None
    return _usage_of(prompt_tokens, completion_tokens)


def _too_large(size: int, limits: VLMLimits) -> JSONResponse:
    return _error(
        413,
        f"The request body ({size} bytes so far) is over this server's limit of {limits.max_body_bytes} "
        "bytes (serve vlm --max-body-mb).",
        "invalid_request_error",
    )


def _busy(gate: CallGate) -> JSONResponse:
    """429 with a retry hint, as vLLM answers when it cannot take more (the last call's seconds)."""
    reply = _error(
        429,
        "The server is busy: a request is running and the wait queue is full (serve vlm --max-waiting); "
        "retry after the Retry-After seconds.",
        "rate_limit_error",
    )
    reply.headers["Retry-After"] = str(max(1, math.ceil(gate.last_seconds)))
    return reply


def _unauthorized() -> JSONResponse:
    reply = _error(401, UNAUTHORIZED, "authentication_error")
    reply.headers["WWW-Authenticate"] = "Bearer"
    return reply


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(status, message, kind))
