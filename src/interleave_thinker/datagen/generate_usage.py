"""Call, token and image counts per backend role of `data generate`, and the cost they add up to.

Why wrappers of our own and not the scheduler's limiter statistics: the judge runs inside the step loop
beside the planner, critic and generator but is no role of the scheduler, and tokens are known only
to the backend that read the server's reply (``last_usage`` of the OpenAI-compatible backend). Every
call the loop makes passes one meter; a retry the transport makes inside one call is not counted again.
A call is counted before it is sent (its server sees it even when a kill stops the run before the reply)
and its tokens and image after; ``datagen/usage_ledger.py`` puts each change on disk.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Unpack

from PIL import Image

from interleave_thinker.backends import protocols as proto
from interleave_thinker.backends.wrapping import VLMWrapper, Wrapper, last_usage
from interleave_thinker.core.config import PriceOptions, RolePrices

ROLES = ("planner", "critic", "judge", "generator")
COUNTS = ("calls", "failed", "input_tokens", "output_tokens", "images_in", "images_out")
"""``failed``: the calls among ``calls`` that got no reply (an error, a refused connection), never an answer."""


@dataclass
class Usage:
    """What one role's backend was asked for: the :data:`COUNTS` (calls, tokens as its server reported
    them, images), named once there and kept as one table."""

    on_change: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    """Called after every change, outside the lock (the ledger writes the counts to disk there)."""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                self.counts[name] += value  # a name outside COUNTS is a KeyError: a bug of the caller
        if self.on_change is not None:
            self.on_change()

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self.counts[name]

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


def _images_in(messages: list[proto.Message]) -> int:
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image"
    )


def reply_tokens(backend: object) -> dict[str, int]:
    """The input and output tokens of ``backend``'s last reply in this thread, as its server reported them
    (``last_usage()`` of the OpenAI-compatible and Gemini backends); zeros when it reports none. A wrapper
    without ``last_usage`` (the scheduler's limiter) is looked through to the backend it wraps."""
    tokens = last_usage(backend)
    return {
        "input_tokens": int(tokens.get("prompt_tokens", 0)),
        "output_tokens": int(tokens.get("completion_tokens", 0)),
    }


class MeteredVLM(VLMWrapper):
    """A chat backend whose every call is counted into ``usage`` (failed calls too: the server saw them);
    the served members pass through (:class:`Wrapper`), so a batch limits the server, not the meter."""

    def __init__(self, inner: proto.VLMBackend, usage: Usage) -> None:
        super().__init__(inner, name=inner.name)
        self.usage = usage

    def chat(self, messages: list[proto.Message], **options: Unpack[proto.ChatOptions]) -> str:
        self.usage.add(calls=1, images_in=_images_in(messages))
        try:
            return self.pass_on(messages, options)
        except Exception:
            self.usage.add(failed=1)
            raise
        finally:
            tokens = reply_tokens(self.inner)
            if any(tokens.values()):
                self.usage.add(**tokens)


class MeteredImage(Wrapper, proto.ImageBatchMixin):
    """A generator whose every call is counted into ``usage``: one image in per edit, one out per success."""

    def __init__(self, inner: proto.ImageBackend, usage: Usage) -> None:
        super().__init__(inner, name=inner.name)
        self.usage = usage

    def generate(self, request: proto.ImageRequest) -> Image.Image:
        self.usage.add(calls=1, images_in=int(request.image is not None))
        try:
            image = self.inner.generate(request)
        except Exception:
            self.usage.add(failed=1)
            raise
        self.usage.add(images_out=1)
        return image


def add_usage(*tables: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    """Per-role counts summed over several runs of one batch (a resume adds to the earlier runs')."""
    total: dict[str, dict[str, int]] = {}
    for table in tables:
        for role, counts in (table or {}).items():
            if not isinstance(counts, dict):
                continue
            merged = total.setdefault(role, dict.fromkeys(COUNTS, 0))
            for name in COUNTS:
                value = counts.get(name, 0)
                merged[name] += value if type(value) is int else 0
    return total


def role_cost(counts: dict[str, int], prices: RolePrices) -> float:
    return (
        counts.get("calls", 0) * prices.per_call
        + counts.get("input_tokens", 0) / 1000 * prices.per_1k_input_tokens
        + counts.get("output_tokens", 0) / 1000 * prices.per_1k_output_tokens
        + counts.get("images_out", 0) * prices.per_image
    )


def estimate_cost(usage: dict[str, dict[str, int]], prices: PriceOptions) -> dict[str, Any] | None:
    """The cost of ``usage`` at ``prices`` per role and in total; None when no price is set."""
    per_role = {role: getattr(prices, role) for role in ROLES}
    if not any(value for p in per_role.values() for value in p.model_dump().values()):
        return None
    costs = {role: round(role_cost(usage.get(role, {}), p), 6) for role, p in per_role.items()}
    return {"currency": prices.currency, "roles": costs, "total": round(sum(costs.values()), 6)}


def usage_lines(usage: dict[str, dict[str, int]], cost: dict[str, Any] | None) -> list[str]:
    """The summary's counts (and cost) as terminal lines, one per role."""
    lines = []
    for role in ROLES:
        c = usage.get(role)
        if c is None:
            continue
        failed = c.get("failed", 0)
        line = (
            f"{role}: {c['calls']} calls" + (f" ({failed} failed, no reply)" if failed else "") + ", "
            f"{c['input_tokens']} input / {c['output_tokens']} output tokens, "
            f"{c['images_in']} images in, {c['images_out']} out"
        )
        if cost is not None:
            line += f", {cost['roles'][role]:.4f} {cost['currency']}"
        lines.append(line)
    if cost is not None:
        lines.append(f"estimated cost: {cost['total']:.4f} {cost['currency']}")
    return lines
