"""Judge calls for the benchmark scorers: exact requests, bounded concurrency, a disk cache, saved replies.

The official scorers send byte-exact bodies (WISE: raw PNG bytes, ``chat_template_kwargs``; RISEBench:
a JPEG thumbnail with ``detail: high``, ``n: 1``), so a request here is a typed value rendered
verbatim: for an ``openai:`` judge the chat-completions body is built field by field and posted through
the backend's own transport (pool, retries, key handling); any other VLM backend gets the same
conversation through ``chat`` (images decoded, so the backend re-encodes them).

Every attempt's reply goes to ``replies.jsonl``; a reply is cached on disk (``replies-cache.jsonl`` in
the cache folder, one line per reply) under the hash of the judge, the request and the attempt number, so a killed run asks nothing twice, a retry after an unparsable
reply is still a fresh question, and a transport failure (not cached) is asked again on resume.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, InitVar, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from interleave_thinker.backends.wrapping import close_backend
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.core.no_follow import open_append, open_append_bytes
from interleave_thinker.core.redact import redact_spec
from interleave_thinker.core.sanitize import clean_text

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

RUN_BUDGET = "eval.judge_calls_per_run"
"""Named in the error of a question the run's budget stopped: such an item is scored again on resume."""
MAX_REPLY_CHARS = 100_000
"""Replies are cut to this length at the boundary (a judge that rambles cannot fill the disk)."""


@dataclass(frozen=True)
class JudgeImage:
    """An image exactly as the protocol sends it: encoded bytes, their MIME type, OpenAI's ``detail``."""

    data: bytes
    mime: str
    detail: str | None = None

    def data_url(self) -> str:
        return f"data:{self.mime};base64," + base64.b64encode(self.data).decode("ascii")


Part = str | JudgeImage


@dataclass(frozen=True)
class JudgeMessage:
    role: str
    parts: tuple[Part, ...]


@dataclass
class JudgeRequest:
    """One judge question: messages plus the body settings after ``messages``, in the official order."""

    messages: tuple[JudgeMessage, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def one_turn(
        cls, parts: tuple[Part, ...], settings: dict[str, Any] | None = None, *, system: str | None = None
    ) -> JudgeRequest:
        """One user turn after the protocol's system text, if any: how most official judges ask."""
        turns = (JudgeMessage("system", (system,)),) if system is not None else ()
        return cls((*turns, JudgeMessage("user", parts)), dict(settings or {}))

    def render(self, image_part: Callable[[JudgeImage], dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as chat dicts: text parts as ``{"type": "text"}``, images by ``image_part``."""
        return [
            {
                "role": message.role,
                "content": [
                    {"type": "text", "text": part} if isinstance(part, str) else image_part(part)
                    for part in message.parts
                ],
            }
            for message in self.messages
        ]

    def openai_messages(self) -> list[dict[str, Any]]:
        """Chat-completions messages: images as data URLs, with ``detail`` when the protocol sets one."""

        def image_url(part: JudgeImage) -> dict[str, Any]:
            url: dict[str, Any] = {"url": part.data_url()}
            if part.detail is not None:
                url["detail"] = part.detail
            return {"type": "image_url", "image_url": url}

        return self.render(image_url)

    def fingerprint(self) -> str:
        """A stable hash of everything sent (images by digest)."""
        shape = [
            [m.role, [p if isinstance(p, str) else [p.mime, p.detail, _sha(p.data)] for p in m.parts]]
            for m in self.messages
        ]
        return _sha(json.dumps([shape, self.settings], sort_keys=True, ensure_ascii=False).encode("utf-8"))

    def text(self) -> str:
        return "\n".join(p for m in self.messages for p in m.parts if isinstance(p, str))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class JudgeTransport(Protocol):
    spec: str

    def model_id(self) -> str: ...

    def send(self, request: JudgeRequest) -> str: ...

    def close(self) -> None: ...


class OpenAITransport:
    """The official body, field by field, through the ``openai:`` backend's pool and retries."""

    bounded = True
    """The backend's own caller holds at most ``remote.concurrency`` requests on the wire; the body is
    built outside that bound, so a slot is never held while we encode."""

    def __init__(self, backend: Any, spec: str) -> None:
        self.backend = backend
        self.spec = spec

    def model_id(self) -> str:
        return str(self.backend._resolve_model())

    def send(self, request: JudgeRequest) -> str:
        body = {"model": self.model_id(), "messages": request.openai_messages(), **request.settings}
        backend = self.backend
        return str(backend._call(lambda client, url, timeout: backend._complete(client, url, timeout, body)))

    def close(self) -> None:
        self.backend.close()


class ChatTransport:
    """Any other VLM backend: the same conversation through ``chat`` (images decoded to PIL)."""

    def __init__(self, backend: Any, spec: str) -> None:
        self.backend = backend
        self.spec = spec

    def model_id(self) -> str:
        """The served model's name where the backend knows one (a string), else the spec as given: a local
        backend's ``model`` is the loaded module, whose repr is no name."""
        model = getattr(self.backend, "model", None)
        return model if isinstance(model, str) and model else redact_spec(self.spec)

    def send(self, request: JudgeRequest) -> str:
        from PIL import Image

        messages = request.render(lambda part: {"type": "image", "image": Image.open(io.BytesIO(part.data))})
        max_tokens = int(request.settings.get("max_tokens", 4096))
        temperature = float(request.settings.get("temperature", 0.0))
        return str(self.backend.chat(messages, max_new_tokens=max_tokens, temperature=temperature))

    def close(self) -> None:
        close_backend(self.backend)


def load_transport(spec: str, concurrency: int, options: BackendOptions | None = None) -> JudgeTransport:
    """A judge from a VLM backend spec on the settings' ``options`` (device, transport), its transport
    allowed ``concurrency`` calls in flight."""
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend

    if concurrency < 1:
        raise ConfigError(f"--judge-concurrency {concurrency} must be at least 1.")
    options = options or BackendOptions()
    remote = options.remote.model_copy(update={"concurrency": concurrency})
    backend = load_vlm_backend(spec, dataclasses.replace(options, remote=remote), role="judge")
    if spec.startswith("openai:"):
        return OpenAITransport(backend, spec)
    return ChatTransport(backend, spec)


@dataclass
class Judgement:
    """The outcome of one question: the parsed value (None = failure), every reply, every error."""

    value: Any = None
    replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Question:
    """A request, how to read its reply (``parse`` raises ValueError when it cannot) and its attempts."""

    request: JudgeRequest
    parse: Callable[[str], Any]
    attempts: int
    role: str


@dataclass(eq=False)
class JudgeClient:
    """Asks questions with at most ``capacity`` calls in flight; caches and logs every reply."""

    transport: JudgeTransport
    _: KW_ONLY
    cache_dir: Path
    log_path: Path
    capacity: InitVar[int]
    calls_per_item: int | None = None
    calls_per_run: int | None = None
    calls: int = field(default=0, init=False)
    """Calls made (cache hits not counted), against ``calls_per_run``."""
    cache_hits: int = field(default=0, init=False)

    def __post_init__(self, capacity: int) -> None:
        self._item_calls: dict[str, int] = {}
        self._lock = threading.Lock()
        # Twice as many threads as slots: the next request is built, and the last reply cached and
        # logged, while ``capacity`` calls stay in flight; the semaphore alone bounds the judge's load.
        self._slots = threading.BoundedSemaphore(capacity)
        self._pool = ThreadPoolExecutor(max_workers=2 * capacity, thread_name_prefix="judge")
        self._model = self.transport.model_id()
        self._log_handle: TextIO | None = None
        self._cache_handle: TextIO | None = None
        self.cache_path = self.cache_dir / "replies-cache.jsonl"
        self._memo = self._load_cache()

    @property
    def model(self) -> str:
        return self._model

    def ask_all(self, item: str, questions: Sequence[Question]) -> list[Judgement]:
        """All questions of one item at once (they are independent); results in order."""
        if len(questions) == 1:  # no hop to another thread: the slots, not the threads, bound the judge
            return [self.ask(item, questions[0])]
        futures = [self._pool.submit(self.ask, item, q) for q in questions]
        return [f.result() for f in futures]

    def ask(self, item: str, question: Question) -> Judgement:
        judgement = Judgement()
        base = question.request.fingerprint()
        for attempt in range(question.attempts):
            key = _sha(json.dumps([self.transport.spec, self._model, base, attempt]).encode("utf-8"))
            reply = self._cached(key)
            cached = reply is not None
            if reply is None:
                spent = self._spend(item)
                if spent is not None:
                    judgement.errors.append(spent)
                    self._log(item, question.role, attempt, key, None, spent, False)
                    return judgement
                try:
                    reply = self._send(question.request)
                except BackendError as exc:
                    error = clean_text(str(exc))
                    judgement.errors.append(f"attempt {attempt + 1}: {error}")
                    self._log(item, question.role, attempt, key, None, error, False)
                    continue
                self._store(key, reply)
            judgement.replies.append(reply)
            self._log(item, question.role, attempt, key, reply, None, cached)
            try:
                judgement.value = question.parse(reply)
                return judgement
            except ValueError as exc:
                judgement.errors.append(f"attempt {attempt + 1}: unparsable reply ({exc})")
        return judgement

    def _spend(self, item: str) -> str | None:
        """Count one call against the budgets; the reason it may not be made when one is spent."""
        with self._lock:
            used = self._item_calls.get(item, 0)
            if self.calls_per_run is not None and self.calls >= self.calls_per_run:
                return f"the run's budget of {self.calls_per_run} judge calls is spent ({RUN_BUDGET})"
            if self.calls_per_item is not None and used >= self.calls_per_item:
                return f"this item's budget of {self.calls_per_item} judge calls is spent (eval.judge_calls_per_item)"
            self._item_calls[item] = used + 1
            self.calls += 1
            return None

    def _send(self, request: JudgeRequest) -> str:
        """One call; the reply cut and cleaned here, once (a lone surrogate could not be written)."""
        if getattr(self.transport, "bounded", False):
            return clean_text(self.transport.send(request)[:MAX_REPLY_CHARS])
        with self._slots:
            return clean_text(self.transport.send(request)[:MAX_REPLY_CHARS])

    def _load_cache(self) -> dict[str, str]:
        """Every reply of earlier runs; a line torn by a kill is ignored (its question is asked again)."""
        memo: dict[str, str] = {}
        if self.cache_path.is_file():
            for line in self.cache_path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                    key, reply = entry["key"], entry["reply"]
                except (ValueError, KeyError, TypeError):
                    continue
                if isinstance(key, str) and isinstance(reply, str):
                    memo[key] = reply
        return memo

    def _cached(self, key: str) -> str | None:
        with self._lock:
            reply = self._memo.get(key)
            if reply is not None:
                self.cache_hits += 1
            return reply

    def _store(self, key: str, reply: str) -> None:
        """One appended line per reply (a file per reply costs milliseconds on many file systems)."""
        line = json.dumps({"key": key, "reply": reply}, ensure_ascii=False) + "\n"
        with self._lock:
            self._memo[key] = reply
            if self._cache_handle is None:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                self._repair_cache_tail()
                self._cache_handle = open_append(self.cache_path)
            self._cache_handle.write(line)
            self._cache_handle.flush()

    def _repair_cache_tail(self) -> None:
        if self.cache_path.is_file():
            data = self.cache_path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open_append_bytes(self.cache_path) as handle:
                    handle.write(b"\n")

    def _log(
        self, item: str, role: str, attempt: int, key: str, reply: str | None, error: str | None, cached: bool
    ) -> None:
        line = {"id": item, "role": role, "attempt": attempt + 1, "key": key, "cached": cached}
        line.update({"reply": reply} if error is None else {"error": error})
        text = json.dumps(line, ensure_ascii=False) + "\n"
        with self._lock:
            if self._log_handle is None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log_handle = open_append(self.log_path)
            self._log_handle.write(text)
            self._log_handle.flush()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.transport.close()
        for handle in (self._log_handle, self._cache_handle):
            if handle is not None:
                handle.close()
