"""A small OpenAI-compatible chat server over any :class:`VLMBackend`, for CPU users and tests.

vLLM (``vllm serve CHECKPOINT``) is the production server: batching, paged attention, GPUs. This one
exists so that the ``openai:`` backend, and any tool that speaks chat completions, can be pointed at
a local transformers model or the tiny models with nothing else installed. It runs one model, one
call at a time (a lock), and accepts images only as base64 ``data:`` URLs: it never fetches URLs.
"""

from __future__ import annotations

import base64
import binascii
import io
import threading
import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field

from interleave_thinker.backends.protocols import Message, VLMBackend
from interleave_thinker.core.errors import BackendError

DEFAULT_MAX_TOKENS = 4096


class ImageURL(BaseModel):
    url: str


class ContentPart(BaseModel):
    """``{"type": "text", "text"}`` or ``{"type": "image_url", "image_url": {"url"}}`` (or a bare url)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    image_url: ImageURL | str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


class ChatRequest(BaseModel):
    """The chat-completions fields we honour; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(
        default=None, ge=0.0, description="Omitted means greedy, as the project's agents default to."
    )
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False


class RequestError(Exception):
    """A request we understand but refuse; becomes an OpenAI-shaped 4xx."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def create_app(backend: VLMBackend, served_name: str) -> FastAPI:
    """The app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``."""
    app = FastAPI(title="interleave-thinker VLM server", version="1")
    lock = threading.Lock()
    created = int(time.time())

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return _error(exc.status, str(exc), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return _error(400, f"Invalid request: {problems}", "invalid_request_error")

    @app.exception_handler(BackendError)
    async def _failed(request: Request, exc: BackendError) -> JSONResponse:
        return _error(500, str(exc), "server_error")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": served_name, "object": "model", "created": created, "owned_by": "interleave-thinker"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    def chat_completions(body: ChatRequest) -> dict[str, Any]:  # sync: FastAPI runs it in a worker thread
        if body.model is not None and body.model != served_name:
            raise RequestError(
                f"The model `{body.model}` does not exist; this server serves `{served_name}`.", 404
            )
        if body.stream:
            raise RequestError("stream=true is not supported by this server; send stream=false.")
        messages = to_project_messages(body.messages)
        max_tokens = body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS
        temperature = body.temperature or 0.0
        with lock:  # one model, one call at a time
            text = backend.chat(messages, max_new_tokens=max_tokens, temperature=temperature)
        return _completion(served_name, text, _usage(backend, messages, text), max_tokens)

    return app


def to_project_messages(messages: list[ChatMessage]) -> list[Message]:
    """Chat-completions messages -> the project's parts, with data-URL images decoded to PIL."""
    result: list[Message] = []
    for index, message in enumerate(messages):
        content = message.content
        parts: list[dict[str, Any]] = []
        if isinstance(content, str):
            parts.append({"type": "text", "text": content})
        for part in content if isinstance(content, list) else []:
            if part.type == "text":
                parts.append({"type": "text", "text": part.text or ""})
            elif part.type == "image_url" and part.image_url is not None:
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                parts.append({"type": "image", "image": decode_data_url(url, where=f"messages[{index}]")})
            else:
                raise RequestError(
                    f"messages[{index}]: unsupported content part type {part.type!r}; "
                    "use 'text' or 'image_url'."
                )
        role = "system" if message.role == "developer" else message.role  # OpenAI's newer name for it
        result.append({"role": role, "content": parts})
    return result


def decode_data_url(url: str, *, where: str = "image_url") -> Image.Image:
    """``data:image/...;base64,...`` -> an RGB PIL image; anything else is a 400."""
    header, sep, payload = url.partition(",")
    if not (url.startswith("data:image/") and sep and header.endswith(";base64")):
        raise RequestError(
            f"{where}: only base64 data URLs (data:image/png;base64,...) are accepted; "
            "this server does not fetch remote images."
        )
    try:
        raw = base64.b64decode(payload, validate=True)
        with Image.open(io.BytesIO(raw)) as image:
            return image.convert("RGB")
    except (binascii.Error, ValueError, UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise RequestError(f"{where}: the data URL is not a readable image ({exc}).") from None


def _completion(served_name: str, text: str, usage: dict[str, int] | None, max_tokens: int) -> dict[str, Any]:
    finish = "length" if usage is not None and usage["completion_tokens"] >= max_tokens else "stop"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": served_name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": usage,
    }


def _usage(backend: VLMBackend, messages: list[Message], text: str) -> dict[str, int] | None:
    """Best effort: token counts from the backend's tokenizer, text only (image tokens not counted)."""
    processor = getattr(backend, "processor", None)
    tokenizer = getattr(processor, "tokenizer", None) or getattr(backend, "tokenizer", None)
    if tokenizer is None or not callable(tokenizer):
        return None
    try:
        prompt = "".join(p["text"] for m in messages for p in m["content"] if p["type"] == "text")
        prompt_tokens = len(tokenizer(prompt)["input_ids"])
        completion_tokens = len(tokenizer(text)["input_ids"])
    except Exception:  # usage is informative only; never fail a reply over it
        return None
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _error(status: int, message: str, kind: str) -> JSONResponse:
    """OpenAI's error shape, so OpenAI clients (and ours) show the message."""
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "code": status}}
    )
