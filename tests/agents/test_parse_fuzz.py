"""Seeded fuzzing of the three reply parsers (issue 16: items 2, 6, 7 and the fuzz acceptance).

Each parser gets 20,000 generated replies: mutations of valid replies (cut anywhere, lone surrogates
and control characters, contradictory values, huge numbers, deep nesting, tag storms, random
unicode) and, now and then, replies stretched up to 1 MB. Only :class:`ParseError` may escape,
every accepted value must be writable as JSON in UTF-8, and no reply may take 100 ms to parse.

The time bound is the issue's own acceptance figure. A machine shared with other jobs can stall
any call, so a reply over the bound is measured again (best of a few runs) before the test fails;
the slowest reply is printed either way.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from interleave_thinker.agents.critic import parse_verdict
from interleave_thinker.agents.judge import parse_judgement
from interleave_thinker.agents.planner import parse_plan
from interleave_thinker.core.errors import ParseError

SEED = 16
REPLIES_PER_PARSER = 20_000
LIMIT_S = 0.1
MAX_CHARS = 1_000_000
BIG_EVERY = 150  # about one reply in this many is stretched towards 1 MB

STEP = (
    "{'step_number': %d, 'step_name': 'Sketch %d', 'instruction': 'Draw the outline of a cat.', "
    "'prompt': 'a pencil sketch of a cat, step %d', 'auxiliary_text': %s}"
)


def _plan(n: int, aux: str = "None") -> str:
    return "{'execution_plan': [" + ", ".join(STEP % (i, i, i, aux) for i in range(1, n + 1)) + "]}"


PLANS = [
    f"<think>Three steps.</think>\n<answer>\n{_plan(3)}\n</answer>",
    f"<think>one</think><answer>{_plan(1, repr('It is a cat.'))}</answer>",
    _plan(2),
    "<answer>"
    + json.dumps(
        {
            "execution_plan": [
                {
                    "step_number": 1,
                    "instruction": None,
                    "prompt": None,
                    "auxiliary_text": "The answer is 4. 😀",
                }
            ]
        },
        ensure_ascii=False,
    )
    + "</answer>",
    "<answer>[{'step_number': '1', 'instruction': 'i', 'prompt': \"it's p\", 'auxiliary_text': None},]</answer>",
    f"<think>long</think><answer>{_plan(8)}",
]
VERDICTS = [
    "<think>The tail is missing.</think><answer>{'previous_step_success': False, 'refine_prompt': 'add the tail'}</answer>",
    "<think>fine</think><answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>",
    '<answer>{"previous_step_success": false, "refine_prompt": "make it \\"orange\\" \\u00e9 \\ud83d\\ude00"}</answer>',
    "{'previous_step_success': False, 'refine_prompt': 'the cat's tail, curled',}",
    "<answer>{'previous_step_success': True, 'refine_prompt': 'cut here",
]
JUDGEMENTS = [
    '||V^=^V||\n{\n"score" : [7, 9],\n"reasoning" : "good"\n}\n||V^=^V||',
    "{'score': [3, 10], 'reasoning': 'meh'}",
    '```json\n{"score": [5, 6.5], "reasoning": "ok"}\n```',
    "[8, 2]",
    "7",
    '{"score": ["4", "5"], "reasoning": "strings"}',
]
TOKENS = [
    "True and False",
    "-True",
    "not False",
    "True False",
    "None",
    "null",
    "true",
    "1e999",
    "NaN",
    "9" * 5000,
    "-" + "9" * 45,
    "1.5",
    "0",
    "'" + "9" * 5000 + "'",
    "'²'",
    "float('inf')",
    "__import__('os')",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "'",
    '"',
    "\\",
    "\\u",
    "\\ud83d",
    "\\udc00",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<ANSWER>",
    "||V^=^V||",
    "```",
    "\x00",
    "\ud800",
    "\udfff",
    "\ud83d\ude00",
    "\u202e",
    "\ufeff",
    "'previous_step_success': True",
    "'score': [1, 2]",
    "'execution_plan': []",
    "None}, {'step_number'",
    "\n",
    " " * 40,
]
FILLERS = ["x", "ab, cd ", "é中😀", "\\n", "'", '"', "<", "{", "[", "\\u00e9", "[1, ", "<answer>", "</think>"]


def _random_unicode(rng: random.Random, n: int) -> str:
    return "".join(chr(rng.randrange(0x110000)) for _ in range(n))


def _mutate(rng: random.Random, text: str) -> str:
    """One random edit: cut, insert, delete, duplicate, replace or reshape."""
    at = rng.randrange(len(text) + 1)
    kind = rng.randrange(10)
    if kind == 0:
        return text[:at]
    if kind == 1:
        return text[:at] + rng.choice(TOKENS) + text[at:]
    if kind == 2:
        return text[:at] + _random_unicode(rng, rng.randrange(1, 8)) + text[at:]
    if kind == 3:
        return text[:at] + text[at + rng.randrange(1, 30) :]
    if kind == 4:
        end = min(len(text), at + rng.randrange(1, 60))
        return text[:end] + text[at:end] * rng.randrange(1, 4) + text[end:]
    if kind == 5:
        for word in ("True", "False", "7", "1", "'p'", "None"):
            if word in text and rng.random() < 0.5:
                return text.replace(word, rng.choice(TOKENS), 1)
        return text[:at] + rng.choice(TOKENS) + text[at:]
    if kind == 6:
        depth = rng.choice([40, 300, 3000])
        return text[:at] + rng.choice(["[", "{'a': ", '{"a":', "("]) * depth + text[at:]
    if kind == 7:
        return text.replace("'", '"') if rng.random() < 0.5 else text.replace('"', "'")
    if kind == 8:
        return (
            text[:at]
            + "".join(rng.choice("{}[]:,'\"\\ \n<>/") for _ in range(rng.randrange(1, 80)))
            + text[at:]
        )
    return text[:at] + chr(rng.randrange(0xD800, 0xE000)) + text[at:]


def _stretch(rng: random.Random, text: str) -> str:
    """A reply grown towards 1 MB: a long think block, a long string, or a repeated piece."""
    size = rng.randrange(50_000, MAX_CHARS)
    filler = rng.choice(FILLERS)
    piece = filler * (size // len(filler))
    kind = rng.randrange(4)
    if kind == 0:
        return f"<think>{piece}</think>{text}"
    if kind == 1 and "'refine_prompt': '" in text:
        return text.replace("'refine_prompt': '", "'refine_prompt': '" + piece, 1)
    if kind == 2:
        at = rng.randrange(len(text) + 1)
        return text[:at] + piece + text[at:]
    chunk = text[rng.randrange(len(text) + 1) :][: rng.randrange(1, 40)] or filler
    return chunk * (size // len(chunk))


def hard_cases() -> list[str]:
    """The shapes the issue measured (seconds before the fix) and their relatives, always included."""
    verdict = "<think>%s</think><answer>{'previous_step_success': True, 'refine_prompt': '%s'}</answer>"
    return [
        "<answer>" * 10_000,  # 80 KB of <answer>: 6 s before
        "<answer>" * 20_000,  # 160 KB: 30 s before
        "<answer>" * 125_000,
        verdict % ("", "x" * 999_900),  # a valid 1 MB verdict: 23-75 s before
        verdict % ("t" * 999_900, ""),
        "<think>" * 140_000,
        "<think></think>" * 66_000,
        "[" * 999_999,
        '{"a":' * 199_999,
        "{'previous_step_success': True, 'refine_prompt': '" + "\\n" * 499_000,
        "[" + "1," * 499_000,
        "||V^=^V||" * 110_000,
        "```\n" * 250_000,
        "<" * MAX_CHARS,
        "{'a': '" + "a'" * 499_000,
        "<answer>" + _plan(1).replace("'step_number': 1", "'step_number': " + "9" * 5000, 1) + "</answer>",
    ]


@dataclass
class Tally:
    accepted: int = 0
    rejected: int = 0
    escaped: list[str] = field(default_factory=list)
    unwritable: list[str] = field(default_factory=list)
    slow: list[tuple[float, str]] = field(default_factory=list)
    slowest: tuple[float, int, str] = (0.0, 0, "")


def _as_json(value: Any) -> bytes:
    if hasattr(value, "model_dump_json"):
        value.model_dump_json().encode("utf-8")
        value = value.model_dump()
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _timed(parse: Callable[[str], Any], reply: str) -> tuple[float, Any]:
    start = time.perf_counter()
    try:
        value = parse(reply)
    except ParseError:
        value = ParseError
    return time.perf_counter() - start, value


def _feed(parse: Callable[[str], Any], reply: str, tally: Tally) -> None:
    try:
        elapsed, value = _timed(parse, reply)
    except Exception as exc:  # the point of the test: anything but ParseError is a bug
        tally.escaped.append(f"{type(exc).__name__}: {exc!s:.100} <- {reply[:120]!r}")
        return
    if value is ParseError:
        tally.rejected += 1
    else:
        tally.accepted += 1
        try:
            _as_json(value)
        except (TypeError, ValueError) as exc:
            tally.unwritable.append(f"{exc!s:.100} <- {reply[:120]!r}")
    if elapsed > tally.slowest[0]:
        tally.slowest = (elapsed, len(reply), reply[:60])
    if elapsed > LIMIT_S:
        tally.slow.append((elapsed, reply))


def _replies(rng: random.Random, seeds: list[str]) -> list[str]:
    everything = PLANS + VERDICTS + JUDGEMENTS
    replies = hard_cases()
    while len(replies) < REPLIES_PER_PARSER:
        reply = rng.choice(seeds if rng.random() < 0.8 else everything)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            reply = _mutate(rng, reply)
        if rng.randrange(BIG_EVERY) == 0:
            reply = _mutate(rng, _stretch(rng, reply)) if rng.random() < 0.5 else _stretch(rng, reply)
        replies.append(reply[:MAX_CHARS])
    return replies


@pytest.mark.parametrize(
    ("parse", "seeds"),
    [(parse_plan, PLANS), (parse_verdict, VERDICTS), (parse_judgement, JUDGEMENTS)],
    ids=["plan", "verdict", "judge"],
)
def test_parser_survives_generated_replies(
    parse: Callable[[str], Any], seeds: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(f"{SEED}-{parse.__name__}")
    for seed in seeds:
        parse(seed)  # the seeds themselves are valid replies
    tally = Tally()
    replies = _replies(rng, seeds)
    for reply in replies:
        _feed(parse, reply, tally)

    still_slow = []
    for first, reply in tally.slow:  # measured again: a stalled machine is not a slow parser
        best = min(_timed(parse, reply)[0] for _ in range(3))
        if best > LIMIT_S:
            still_slow.append(
                f"{best * 1000:.0f} ms (first {first * 1000:.0f} ms), {len(reply)} chars: {reply[:60]!r}"
            )
    elapsed, length, head = tally.slowest
    with capsys.disabled():
        print(
            f"\n{parse.__name__}: {len(replies)} replies, {tally.accepted} accepted, {tally.rejected} rejected; "
            f"slowest {elapsed * 1000:.1f} ms ({length} chars, {head!r}), {len(tally.slow)} re-measured"
        )
    assert len(replies) >= 20_000 and max(len(r) for r in replies) <= MAX_CHARS
    assert tally.escaped == [], tally.escaped[:5]
    assert tally.unwritable == [], tally.unwritable[:5]
    assert still_slow == [], still_slow[:5]
    assert tally.accepted > 500 and tally.rejected > 500  # the generator exercises both outcomes
