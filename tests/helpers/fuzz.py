"""Seeded reply fuzzing shared by the parser fuzz test and the reward dialects test."""

from __future__ import annotations

import json
import random

REPLIES_PER_PARSER = 20_000
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
