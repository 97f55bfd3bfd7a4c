"""What every agent is: a chat backend, the template set, a token budget and a retry policy.

An agent's module reads top down: the templates it uses, how it builds its messages, how it parses
the reply (and writes one, the inverse), then the agent, a subclass of :class:`Agent` that asks with
:meth:`Agent.ask` and wraps the outcome in its own result type. Sampling temperatures belong to the
retry policy (greedy first, sampled retries).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

from interleave_thinker.agents.messages import Message
from interleave_thinker.agents.retry import Outcome, RetryPolicy
from interleave_thinker.backends.protocols import VLMBackend
from interleave_thinker.core.prompt_store import TemplateSet

T = TypeVar("T")


class Agent:
    """A VLM backend asked with filled templates; unparsable replies are asked again by ``retry``."""

    DEFAULT_MAX_NEW_TOKENS: ClassVar[int] = 4096

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

    def ask(self, messages: list[Message], parse: Callable[[str], T]) -> Outcome[T]:
        """One turn: call the backend, parse, and call again on a bad reply, as the retry policy says."""
        return self.retry.run(
            lambda temperature: self.backend.chat(
                messages, max_new_tokens=self.max_new_tokens, temperature=temperature
            ),
            parse,
        )
