"""Chat backend over any OpenAI-compatible ``/v1/chat/completions`` server: vLLM, SGLang, OpenAI.

Why a client-side pool and not only a load balancer: planner and critic replicas are often a handful
of ``vllm serve`` processes on different hosts; listing them in the spec
(``openai:http://a:8000/v1,http://b:8000/v1#planner``) spreads calls round-robin and rides over a
replica that restarts, with no extra service to run. Transport, retries and deadlines live in
:mod:`interleave_thinker.backends.remote`; this module only speaks the chat-completions dialect.

The reply is the text the model wrote. An engine with a reasoning parser on (vLLM and SGLang with
``--reasoning-parser qwen3``; ``transformers serve`` always for Qwen models) moves the ``<think>`` block
out of ``content`` into ``reasoning_content`` or ``reasoning``; :func:`rebuild_reply` puts it back, so the
trace, the parsers, the exports and the rewards read the same text as a local ``transformers:`` run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Unpack
from urllib.parse import urlsplit

import httpx

from interleave_thinker.backends._images import apply_max_pixels, bound_pixels
from interleave_thinker.backends.encoding import png_data_url
from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    Message,
    VLMBatchMixin,
)
from interleave_thinker.backends.remote import RetryableError, RetrySettings
from interleave_thinker.backends.remote_backend import RemoteBackend, caller_settings, key_envs
from interleave_thinker.core import green
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

logger = logging.getLogger(__name__)

PIXEL_FACTOR = 32
"""Qwen3-VL's patch size (16) times its spatial merge size (2): resized sides are multiples of it."""
DEFAULT_MAX_PIXELS = 16384 * 32 * 32
"""Bound for image parts without ``max_pixels``: the ``size["longest_edge"]`` (16,777,216 px, 4096²)
that the Qwen3-VL checkpoints ship in ``preprocessor_config.json``. (transformers' class default for
``Qwen2VLImageProcessor``, which Qwen3-VL uses, is 28*28*1280; the checkpoints override it.) The
server's processor bounds the image again; this one only keeps request bodies sane."""
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where engines put a split-out think block: ``reasoning_content`` (SGLang, transformers serve, vLLM
before its rename), ``reasoning`` (vLLM since the rename, OpenRouter-style servers). First non-blank wins."""


class OpenAIVLMBackend(RemoteBackend, VLMBatchMixin):
    """``chat`` = one ``POST {base}/chat/completions`` through a pool of base URLs with retries."""

    def __init__(
        self,
        base_urls: str | Sequence[str],
        model: str | None = None,
        *,
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        cooldown: float = 30.0,
        api_key_env: str | None = None,
        default_max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        urls = [_normalize_url(u) for u in urls]
        self.model = model or None
        self.default_max_pixels = default_max_pixels
        self.concurrency = concurrency
        self.key_envs, configured = key_envs(api_key_env, (DEFAULT_KEY_ENV,))
        self.name = f"openai:{','.join(urls)}#{self.model or '?'}"
        self.api_key(required=configured, configured=configured)  # optional for local servers
        self.open_caller(urls, retry=retry, concurrency=concurrency, cooldown=cooldown)
        self._model_lock = green.Lock()  # held across the discovery call: may suspend in a batch
        self._usage = green.Local()  # per request: the batch runs many on one thread

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OpenAIVLMBackend:
        """``BASE_URL[,BASE_URL...][#MODEL]``, e.g. ``http://127.0.0.1:8000/v1#planner``."""
        urls_part, _, model = target.partition("#")
        urls = [u.strip() for u in urls_part.split(",") if u.strip()]
        if not urls:
            raise ConfigError(
                f"openai spec target {target!r} has no base URL; write e.g. "
                "'openai:http://127.0.0.1:8000/v1#MODEL' (several URLs separated by commas)."
            )
        remote = options.remote
        return cls(urls, model.strip() or None, cooldown=remote.cooldown, **caller_settings(remote))

    # -- the protocol ---------------------------------------------------------------------------

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        model = self._resolve_model()
        body = {
            "model": model,
            "messages": self.to_openai_messages(messages),
            "max_tokens": call.max_new_tokens,
        }
        if call.temperature is not None:  # None: the server's own defaults (agents.decoding checkpoint)
            body["temperature"] = float(call.temperature)
        self._usage.value = {}
        return str(self._call(lambda client, url, timeout: self._complete(client, url, timeout, body)))

    def last_usage(self) -> dict[str, int]:
        """Token counts the server reported for this thread's last reply (``prompt_tokens``,
        ``completion_tokens``; empty when it sent none): what `data generate` counts and prices."""
        return dict(getattr(self._usage, "value", {}))

    def _chat_many(
        self, conversations: list[list[Message]], max_new_tokens: int, temperature: float | None
    ) -> list[str]:
        """Concurrent calls (up to ``concurrency``): the server batches them, so a batch is not a loop."""
        if len(conversations) <= 1:
            return super()._chat_many(conversations, max_new_tokens, temperature)
        self._resolve_model()
        workers = min(self.concurrency, len(conversations))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-chat") as executor:
            futures = [
                executor.submit(self.chat, c, max_new_tokens=max_new_tokens, temperature=temperature)
                for c in conversations
            ]
            return [f.result() for f in futures]

    # -- message conversion ---------------------------------------------------------------------

    def to_openai_messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        """Project messages -> chat-completions messages; images become bounded PNG data URLs."""
        converted: list[dict[str, Any]] = []
        for message in apply_max_pixels(messages, PIXEL_FACTOR):
            content = message.get("content")
            if not isinstance(content, list):
                converted.append({"role": message["role"], "content": content})
                continue
            parts: list[dict[str, Any]] = []
            for part in content:
                if part.get("type") == "image":
                    image = bound_pixels(part["image"], self.default_max_pixels, PIXEL_FACTOR)
                    parts.append({"type": "image_url", "image_url": {"url": png_data_url(image)}})
                elif part.get("type") == "text":
                    parts.append({"type": "text", "text": part["text"]})
                else:
                    raise BackendError(f"{self.name}: unsupported message part type {part.get('type')!r}.")
            converted.append({"role": message["role"], "content": parts})
        return converted

    # -- transport ------------------------------------------------------------------------------

    def _call(self, request: Any) -> Any:
        """Run ``request`` through the caller, which scrubs the API key from any error it raises."""
        return self.caller.call(request)

    def _headers(self) -> dict[str, str]:
        # Read at every call and never kept: the key lives only in the environment.
        key = self.api_key(required=False)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _complete(self, client: httpx.Client, url: str, timeout: float, body: dict[str, Any]) -> str:
        response = client.post(f"{url}/chat/completions", json=body, headers=self._headers(), timeout=timeout)
        self.check_reply(response)
        try:
            reply = rebuild_reply(response.json()["choices"][0]["message"])
        except MalformedReply as exc:
            raise RetryableError(
                f"reply with {exc} (HTTP {response.status_code}): {self._snippet(response.text)}"
            ) from None
        except (ValueError, KeyError, IndexError, TypeError):
            raise RetryableError(
                f"reply without choices[0].message.content (HTTP {response.status_code}): "
                f"{self._snippet(response.text)}"
            ) from None
        usage = response.json().get("usage")  # a dict: choices[0] was read from it
        if isinstance(usage, dict):
            self._usage.value = {
                k: v
                for k, v in usage.items()
                if k in ("prompt_tokens", "completion_tokens") and type(v) is int
            }
        return reply

    def _resolve_model(self) -> str:
        """The spec's ``#MODEL``, else the first model the first reachable server lists (asked once)."""
        if self.model is not None:
            return self.model
        with self._model_lock:
            if self.model is None:
                try:
                    self.model = str(self._call(self._discover))
                except BackendError as exc:
                    urls = ", ".join(f"{u}/models" for u in self.pool.urls)
                    raise BackendError(
                        f"{self.name}: cannot discover the model name from GET {urls}: {exc}. "
                        "Check the server is up, or name the model in the spec: 'openai:URL#MODEL'."
                    ) from exc
                self.name = self.caller.name = self._display_name()
                logger.info("%s: serving model %r", self.name, self.model)
            return self.model

    def _discover(self, client: httpx.Client, url: str, timeout: float) -> str:
        response = client.get(f"{url}/models", headers=self._headers(), timeout=timeout)
        self.check_reply(response)
        try:
            ids = [str(entry["id"]) for entry in response.json()["data"]]
        except (ValueError, KeyError, TypeError):
            raise RetryableError(f"not a model list: {self._snippet(response.text)}") from None
        if not ids:
            raise BackendError(f"{url}/models lists no model")
        if len(ids) > 1:
            logger.info("%s lists %d models; using the first, %r", url, len(ids), ids[0])
        return ids[0]

    def _snippet(self, text: str, limit: int = 300) -> str:
        """Scrubbed first, then cut: a cut must not leave a prefix of the key."""
        text = self.caller.scrub(text)
        return text if len(text) <= limit else text[:limit] + "..."

    def _display_name(self) -> str:
        return f"openai:{','.join(self.pool.urls)}#{self.model or '?'}"


class MalformedReply(ValueError):
    """A reply field of a type the wire format does not allow; its text names the field and the type."""


def rebuild_reply(message: Any) -> str:
    """The text the model wrote, from one ``choices[i].message``: a split-out reasoning field goes back
    in front of ``content`` as ``<think>\\n...\\n</think>\\n``.

    Why this layout: it is what the release's models write and what a local run's raw reply holds (the
    Qwen3-VL Instruct templates, and the tiny models', put no ``<think>`` in the prompt, so the model
    writes the whole block). Engines trim the whitespace around the two parts differently (vLLM keeps
    it, transformers serve strips it), so both are stripped and joined with exactly one newline on each
    side. ``content`` that already holds the think block (no parser, or our own ``serve vlm``) is kept
    as sent. Both fields are bounded the same way: text or null, anything else is a malformed reply;
    the rebuilt reply is one text, bounded where every reply is (the agents' ``MAX_REPLY_CHARS``).
    :class:`MalformedReply` for a field that is neither text nor null; ``KeyError``/``TypeError`` when
    there is no ``content`` (null ``content`` is allowed only beside a reasoning field: a reply cut off,
    or ended, inside or right after its think block).
    """
    content = message["content"]
    reasoning = None
    for field in ("content", *REASONING_FIELDS):
        value = message.get(field)
        if value is not None and not isinstance(value, str):
            raise MalformedReply(f"choices[0].message.{field} of type {type(value).__name__}, not text")
        if field != "content" and reasoning is None and value and value.strip():
            reasoning = value.strip()
    if reasoning is None:
        if content is None:
            raise KeyError("content")
        return str(content).strip()
    answer = (content or "").strip()
    if answer[:7].lower() == "<think>":  # the engine sent the block inline as well: keep the reply as sent
        return answer
    return f"<think>\n{reasoning}\n</think>\n{answer}".strip()


def _normalize_url(url: str) -> str:
    """Check the scheme; a bare ``http://host:port`` gets the usual ``/v1`` prefix."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"openai base URL {url!r} is not an http(s) URL; write e.g. 'http://127.0.0.1:8000/v1'."
        )
    url = url.strip().rstrip("/")
    return url + "/v1" if parts.path in ("", "/") else url
