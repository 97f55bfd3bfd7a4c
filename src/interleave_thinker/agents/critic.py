"""The critic agent: judges one attempt from the images before and after it, and refines the prompt."""

from __future__ import annotations

from dataclasses import dataclass, field

from PIL import Image

from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.backends.protocols import VLMBackend
from interleave_thinker.core.messages import critic_messages
from interleave_thinker.core.parsing import parse_verdict
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.types import Verdict


@dataclass
class CriticResult:
    verdict: Verdict | None
    raw_replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0


class Critic:
    def __init__(
        self,
        backend: VLMBackend,
        templates: TemplateSet,
        *,
        retry: RetryPolicy | None = None,
        max_new_tokens: int = 4096,
    ) -> None:
        self.backend = backend
        self.templates = templates
        self.retry = retry or RetryPolicy()
        self.max_new_tokens = max_new_tokens

    def review(
        self, *, before: Image.Image, after: Image.Image, original_instruction: str, rewritten_prompt: str
    ) -> CriticResult:
        """A verdict on this attempt, or none (with the replies and errors) when every reply was unparsable."""
        messages = critic_messages(
            self.templates,
            before=before,
            after=after,
            original_instruction=original_instruction,
            rewritten_prompt=rewritten_prompt,
        )
        outcome = self.retry.run(
            lambda temperature: self.backend.chat(
                messages, max_new_tokens=self.max_new_tokens, temperature=temperature
            ),
            parse_verdict,
        )
        return CriticResult(outcome.value, outcome.raw_replies, outcome.errors, round(outcome.duration_s, 4))
