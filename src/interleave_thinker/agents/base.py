"""What every agent is: a chat backend, the template set, a token budget and a retry policy.

An agent's module reads top down: the templates it uses, how it builds its messages, how it parses
the reply (and writes one, the inverse), then the agent, a subclass of :class:`Agent` that asks with
:meth:`Agent.ask` and wraps the outcome in its own result type. Decoding (the model's own, or greedy
first and sampled retries) belongs to the retry policy; the seed of each call to the turn
(``agents/seeds.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import ClassVar, Self, TypeVar

from interleave_thinker.agents.messages import Message
from interleave_thinker.agents.retry import Outcome, RetryPolicy
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.backends.protocols import MAX_NEW_TOKENS, VLMBackend, seed_kwargs
from interleave_thinker.core.prompt_store import TemplateSet

T = TypeVar("T")
A = TypeVar("A", bound="Agent")


class Agent:
    """A VLM backend asked with filled templates; unparsable replies are asked again by ``retry``."""

    DEFAULT_MAX_NEW_TOKENS: ClassVar[int] = MAX_NEW_TOKENS
    ROLE: ClassVar[str] = "agent"
    """Names the agent in its calls' seeds (``agents/seeds.py``)."""

    def __init__(
        self,
        backend: VLMBackend,
        templates: TemplateSet,
        *,
        retry: RetryPolicy | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        self.backend = backend
        self.templates = templates
        self.retry = retry or RetryPolicy()
        self.max_new_tokens = self.DEFAULT_MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens

    def on(self, backend: VLMBackend) -> Self:
        """The same agent (templates, retries, budget) asking ``backend``, e.g. the batch's limiter of
        its own backend; this one is unchanged."""
        other = copy.copy(self)
        other.backend = backend
        return other

    def sibling(self, kind: type[A], backend: VLMBackend | None = None) -> A:
        """An agent of ``kind`` with this one's templates, retries and budget, asking ``backend`` (this
        one's when None): the ranker and the sequence reviewer are made from the critic this way."""
        return kind(
            backend or self.backend, self.templates, retry=self.retry, max_new_tokens=self.max_new_tokens
        )

    def ask(self, messages: list[Message], parse: Callable[[str], T], turn: Turn | None = None) -> Outcome[T]:
        """One turn: call the backend, parse, and call again on a bad reply, as the retry policy says.

        With ``turn``, every call carries its seed (``Turn.seed``), recorded in the outcome."""
        seeds: list[int] = []

        def call(temperature: float | None) -> str:
            seed = None if turn is None else turn.seed(self.ROLE, len(seeds))
            if seed is not None:
                seeds.append(seed)
            return self.backend.chat(
                messages,
                max_new_tokens=self.max_new_tokens,
                temperature=temperature,
                **seed_kwargs(self.backend, seed),
            )

        outcome = self.retry.run(call, parse)
        outcome.seeds = seeds
        return outcome
