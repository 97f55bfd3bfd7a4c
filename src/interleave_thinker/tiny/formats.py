"""Format-constrained decoding for the tiny stand-ins: a request whose shape a module registered
(``agents/reply_formats.py``) gets a reply in that format; the tiny model picks only the values.

Why: the tiny planner, critic and judge were format-trained on the release's formats only (minutes of CPU
per rebuild of the shipped models). The ranking, the sequence review, the GRPO reward's text-first
judgement and the benchmark judges' protocols ask for other replies; teaching each one would add training
time to every build. Here the reply's skeleton (its fixed text) is imposed token by token while the model
generates, and where the skeleton leaves a value open (a score, an attempt number, a step) only the tokens
of its allowed values are allowed: the model's own logits choose among them, greedily or sampled as the
call asks. The values mean nothing (the stand-in was never taught what they measure), which every page
made with the tiny preset says. A request of no registered shape is answered as before.
"""

from __future__ import annotations

import functools
from typing import Any

from interleave_thinker.agents.reply_formats import Choice, Skeleton, skeleton_for
from interleave_thinker.backends.protocols import Message

State = tuple[int, int, int]
"""(segment, option, tokens of the option consumed so far)."""


class SkeletonAutomaton:
    """The token sequences a skeleton allows, walked as a small NFA: each segment is one or more options
    (fixed text is one option), each option a token sequence; a reply is one option of every segment in
    order, then an end token."""

    def __init__(self, tokenizer: Any, skeleton: Skeleton, end_ids: list[int]) -> None:
        def ids(text: str) -> tuple[int, ...]:
            return tuple(tokenizer.encode(text, add_special_tokens=False))

        self.segments = [
            tuple(ids(o) for o in piece.options) if isinstance(piece, Choice) else (ids(piece),)
            for piece in skeleton
        ]
        self.end_ids = end_ids

    def _close(self, states: set[State]) -> set[State]:
        """Every state reached without a token: an option fully consumed moves on to the next segment."""
        todo, seen = list(states), set(states)
        while todo:
            seg, opt, pos = todo.pop()
            if seg < len(self.segments) and pos == len(self.segments[seg][opt]):
                for nxt in (
                    ((seg + 1, o, 0) for o in range(len(self.segments[seg + 1])))
                    if seg + 1 < len(self.segments)
                    else [(seg + 1, 0, 0)]
                ):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
        return seen

    def allowed(self, generated: list[int]) -> list[int]:
        """The tokens that may come after ``generated`` (the reply so far); the end tokens once it is whole."""
        states = self._close(
            {(0, o, 0) for o in range(len(self.segments[0]))} if self.segments else {(0, 0, 0)}
        )
        for token in generated:
            states = self._close(
                {
                    (seg, opt, pos + 1)
                    for seg, opt, pos in states
                    if seg < len(self.segments)
                    and pos < len(self.segments[seg][opt])
                    and self.segments[seg][opt][pos] == token
                }
            )
            if not states:
                return list(self.end_ids)
        allowed: set[int] = set()
        for seg, opt, pos in states:
            if seg >= len(self.segments):
                allowed.update(self.end_ids)
            elif pos < len(self.segments[seg][opt]):
                allowed.add(self.segments[seg][opt][pos])
        return sorted(allowed) or list(self.end_ids)


def constraint(
    tokenizer: Any, end_ids: list[int], messages: list[Message], prompt_length: int
) -> dict[str, Any]:
    """``generate`` keywords imposing the registered format of ``messages``; none for an unregistered shape."""
    found = skeleton_for(messages)
    if found is None:
        return {}
    automaton = SkeletonAutomaton(tokenizer, found[1], end_ids)

    def allowed(batch_id: int, ids: Any) -> list[int]:
        return automaton.allowed([int(t) for t in ids[prompt_length:]])

    return {"prefix_allowed_tokens_fn": allowed}


def constrain_formats(backend: Any) -> Any:
    """Make a loaded tiny ``transformers:`` backend answer registered request shapes in their format."""
    tokenizer = backend.processor.tokenizer
    end = backend.model.generation_config.eos_token_id
    end_ids = [int(t) for t in (end if isinstance(end, list) else [end])]
    backend.extra_generation = functools.partial(constraint, tokenizer, end_ids)
    return backend
