"""``stream: true`` on ``serve vlm``: the reply as ``chat.completion.chunk`` Server-Sent Events, in
the order vLLM sends them.

::

    data: {"id": "chatcmpl-..", "object": "chat.completion.chunk", "created": .., "model": ..,
           "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
                        "finish_reason": null}]}
    data: {... "delta": {"content": "Step"} ...}             (one per piece of text)
    data: {... "delta": {}, "finish_reason": "stop"}         ("length" at max_tokens)
    data: {... "choices": [], "usage": {...}}                 (only with stream_options.include_usage)
    data: [DONE]

Tokens, when they can be had cheaply: a local transformers model (``transformers:``, ``tiny:``) is
handed a :class:`transformers.TextStreamer` through the ``generate`` wrapper of
:mod:`~interleave_thinker.server.cancel`, so its text arrives as it is decoded. Every other backend
(``openai:``, ``gemini:``, test doubles) answers in one call: its reply is one content delta. Either
way the deltas add up to exactly the non-streaming reply (the backend's final, stripped text is the
reference; see :class:`DeltaText`). A failure after the first event is an error event (``data:
{"error": {...}}``, as vLLM sends it), then ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from interleave_thinker.server.cancel import CallGate
from interleave_thinker.server.vlm_errors import failure_body

logger = logging.getLogger(__name__)

DONE = "data: [DONE]\n\n"
DISCONNECT_POLL_S = 0.25


def sse(payload: dict[str, Any]) -> str:
    """One Server-Sent Event carrying ``payload`` as JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def tokenizer_of(backend: Any) -> Any:
    """The backend's tokenizer (a transformers processor's, or its own), else None."""
    processor = getattr(backend, "processor", None)
    tokenizer = getattr(processor, "tokenizer", None) or getattr(backend, "tokenizer", None)
    return tokenizer if callable(tokenizer) else None


def token_streamer(backend: Any, push: Callable[[str], None]) -> Any:
    """A ``TextStreamer`` calling ``push`` with each piece of decoded reply text (the prompt and
    special tokens left out), or None when the backend has no tokenizer that can decode."""
    tokenizer = tokenizer_of(backend)
    if tokenizer is None or not callable(getattr(tokenizer, "decode", None)):
        return None
    from transformers import TextStreamer

    class Feed(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text:
                push(text)

    return Feed(tokenizer, skip_prompt=True, skip_special_tokens=True)


class DeltaText:
    """Streamed pieces -> deltas that add up to the backend's final reply.

    The backend strips its reply, so leading whitespace is dropped and trailing whitespace held back
    until more text follows it; :meth:`finish` sends what the final reply has beyond what was sent.
    """

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.pending = ""

    def feed(self, piece: str) -> str:
        self.pending += piece
        if not self.sent:
            self.pending = self.pending.lstrip()
        ready = self.pending.rstrip()
        self.pending = self.pending[len(ready) :]
        if ready:
            self.sent.append(ready)
        return ready

    def finish(self, final: str) -> str:
        sent = "".join(self.sent)
        if not final.startswith(sent):  # a decoder that streams other text than it returns: rare
            logger.warning(
                "serve vlm: the streamed text differs from the final reply after %d chars", len(sent)
            )
            return ""
        return final[len(sent) :]


@dataclass
class StreamJob:
    """One streaming request, its checks passed: what to call and how to describe the result."""

    gate: CallGate
    call: Callable[[], str]
    served_name: str
    settle: Callable[[str], tuple[dict[str, int] | None, str]]
    """Final text -> (usage or None, finish reason); also feeds the service's token counter."""
    streamer: Callable[[Callable[[str], None]], Any] = lambda push: None
    include_usage: bool = False
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse(self._head() | {"choices": [choice]})

    def usage(self, usage: dict[str, int] | None) -> str:
        return sse(self._head() | {"choices": [], "usage": usage})

    def _head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.served_name,
        }


async def events(job: StreamJob, request: Request) -> AsyncIterator[str]:
    """The events of one streamed reply. The model runs in a worker thread, one call at a time; a
    client that leaves (seen by polling, or as this generator's cancellation) sets the call's flag,
    which stops a local model at its next token, as the non-streaming path does."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str] = asyncio.Queue()

    def push(text: str) -> None:  # from the model's thread
        with contextlib.suppress(RuntimeError):  # the loop is gone (server stopped): nobody reads it
            loop.call_soon_threadsafe(pieces.put_nowait, text)

    gone = threading.Event()
    work: asyncio.Future[str | None] = asyncio.ensure_future(
        asyncio.to_thread(job.gate.run, gone, job.call, job.streamer(push))
    )
    delta = DeltaText()
    try:
        yield job.chunk({"role": "assistant", "content": ""})
        getter: asyncio.Future[str] | None = None
        while not work.done():
            getter = getter or asyncio.ensure_future(pieces.get())
            waiting: list[asyncio.Future[Any]] = [work, getter]
            await asyncio.wait(waiting, timeout=DISCONNECT_POLL_S, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                text, getter = delta.feed(getter.result()), None
                if text:
                    yield job.chunk({"content": text})
            elif not work.done() and await request.is_disconnected():
                return  # the finally stops the model
        if getter is not None and getter.done():
            pieces.put_nowait(getter.result())
        elif getter is not None:
            getter.cancel()
        rest = "".join(delta.feed(pieces.get_nowait()) for _ in range(pieces.qsize()))
        try:
            final = work.result()
        except Exception as exc:  # the stream has started: the error goes in it
            yield sse(failure_body(exc))
            yield DONE
            return
        if final is None:  # the client left while queued
            return
        rest += delta.finish(final)
        if rest:
            yield job.chunk({"content": rest})
        usage, finish = job.settle(final)
        yield job.chunk({}, finish)
        if job.include_usage:
            yield job.usage(usage)
        yield DONE
    finally:
        if not work.done():
            job.gate.cancelled += 1
        gone.set()  # also on cancellation (client gone, server stopping): stop the model
