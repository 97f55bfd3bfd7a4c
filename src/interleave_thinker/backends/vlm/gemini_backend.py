"""Chat backend over Google's Gemini API through the ``google-genai`` SDK (optional extra).

The SDK is imported inside the constructor, so the package works without it and a missing install
is one clear error. Retries reuse :class:`~interleave_thinker.backends.remote.RemoteCaller` (one
pseudo-endpoint, ``gemini:MODEL``): the SDK raises ``google.genai.errors.APIError`` (subclasses
``ClientError`` for 4xx, ``ServerError`` for 5xx) carrying the HTTP status in an integer ``code``
attribute, and lets ``httpx`` transport errors through. We classify errors by that ``code`` rather
than by class, so we never import the SDK's error module and tests can raise look-alikes.

Requests use the SDK's dict forms: ``contents`` is a list of ``{"role", "parts"}`` with
``{"text"}`` and ``{"inline_data": {"mime_type": "image/png", "data": bytes}}`` parts (PNG is
lossless, so the model sees exactly the pixels the local backend would), system messages become
``config["system_instruction"]``, assistant turns get Gemini's role name ``model``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Unpack

from interleave_thinker.backends._images import apply_max_pixels, bound_pixels
from interleave_thinker.backends.encoding import png_bytes
from interleave_thinker.backends.gemini_sdk import GeminiSDKBackend
from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    Message,
    VLMBatchMixin,
)
from interleave_thinker.backends.remote import RetryableError, RetrySettings
from interleave_thinker.backends.remote_backend import caller_settings
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

PIXEL_FACTOR = 32
DEFAULT_MAX_PIXELS = 16384 * 32 * 32
"""Same bound as the openai backend (Qwen3-VL's default ``longest_edge``): keeps request bodies sane."""


class GeminiVLMBackend(GeminiSDKBackend, VLMBatchMixin):
    """``chat`` = one ``client.models.generate_content`` call, retried on 408/429/5xx (not 501) and
    transport errors."""

    def __init__(
        self,
        model: str,
        *,
        client: Any | None = None,
        api_key_env: str | None = None,
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        default_max_pixels: int = DEFAULT_MAX_PIXELS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model:
            raise ConfigError("gemini spec has no model; write e.g. 'gemini:gemini-2.5-pro'.")
        self.model = model
        self.name = f"gemini:{model}"
        self.default_max_pixels = default_max_pixels
        self.retry = retry or RetrySettings()
        self.open_client(client, api_key_env, concurrency, sleep)
        self._usage = threading.local()

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> GeminiVLMBackend:
        """``MODEL``, e.g. ``gemini-2.5-pro``."""
        return cls(target.strip(), **caller_settings(options.remote))

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        contents, system = self.to_gemini_contents(messages)
        config: dict[str, Any] = {"max_output_tokens": call.max_new_tokens}
        if call.temperature is not None:  # None: the model's own defaults (agents.decoding checkpoint)
            config = {"temperature": float(call.temperature), **config}
        if system:
            config["system_instruction"] = system
        self._usage.value = {}
        return str(self.caller.call(lambda _client, _url, timeout: self._generate(contents, config, timeout)))

    def last_usage(self) -> dict[str, int]:
        """Token counts of this thread's last reply (from ``usage_metadata``; empty when absent), named as
        the OpenAI-compatible backend names them: what `data generate` counts and prices."""
        return dict(getattr(self._usage, "value", {}))

    def to_gemini_contents(self, messages: list[Message]) -> tuple[list[dict[str, Any]], str | None]:
        """Project messages -> (Gemini ``contents``, system instruction or None)."""
        contents: list[dict[str, Any]] = []
        system: list[str] = []
        for message in apply_max_pixels(messages, PIXEL_FACTOR):
            content = message.get("content")
            items: list[dict[str, Any]] = (
                [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            )
            if message["role"] == "system":
                system.extend(p["text"] for p in items if p.get("type") == "text")
                continue
            parts: list[dict[str, Any]] = []
            for part in items:
                if part.get("type") == "image":
                    image = bound_pixels(part["image"], self.default_max_pixels, PIXEL_FACTOR)
                    parts.append({"inline_data": {"mime_type": "image/png", "data": png_bytes(image)}})
                elif part.get("type") == "text":
                    parts.append({"text": part["text"]})
                else:
                    raise BackendError(f"{self.name}: unsupported message part type {part.get('type')!r}.")
            role = "model" if message["role"] == "assistant" else "user"
            contents.append({"role": role, "parts": parts})
        return contents, "\n\n".join(system) or None

    def _generate(self, contents: list[dict[str, Any]], config: dict[str, Any], timeout: float) -> str:
        """One SDK call; SDK errors are translated here, at the boundary."""
        request_config = {**config, "http_options": {"timeout": int(timeout * 1000)}}  # the SDK wants ms
        try:
            response = self.client.models.generate_content(
                model=self.model, contents=contents, config=request_config
            )
        except Exception as exc:
            raise self.sdk_error(exc) from exc
        text = getattr(response, "text", None)
        if not isinstance(text, str) or not text.strip():
            raise RetryableError(f"reply without text (blocked or empty): {_finish_reason(response)}")
        meta = getattr(response, "usage_metadata", None)
        counts = {
            "prompt_tokens": getattr(meta, "prompt_token_count", None),
            "completion_tokens": getattr(meta, "candidates_token_count", None),
        }
        self._usage.value = {k: v for k, v in counts.items() if type(v) is int}
        return text.strip()


def _finish_reason(response: Any) -> str:
    """What Gemini says about an empty reply (safety block, token limit), for the error message."""
    candidates = getattr(response, "candidates", None) or []
    reason = getattr(candidates[0], "finish_reason", None) if candidates else None
    feedback = getattr(response, "prompt_feedback", None)
    return f"finish_reason={reason}, prompt_feedback={feedback}"
