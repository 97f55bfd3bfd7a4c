"""Writing a reply is the inverse of reading one: ``parse(format(x)) == x`` for seeded random plans and
verdicts (unicode, quotes, braces, backslashes, tags, empty and missing optional fields), and values
that no reply can carry are refused instead of coming back changed."""

from __future__ import annotations

import random
import re

import pytest

from interleave_thinker.agents.critic import format_verdict, parse_verdict
from interleave_thinker.agents.planner import (
    MALFORMED_STEP_SIGNATURE,
    MAX_PLAN_STEPS,
    MAX_STEP_NUMBER,
    format_plan,
    parse_plan,
)
from interleave_thinker.agents.reply import literal
from interleave_thinker.core.types import Plan, PlanStep, Verdict

SEED = 2026
CASES = 2_000

PIECES = [
    "a cat",
    " ",
    "'",
    '"',
    "it's",
    '"quoted"',
    "\\",
    "\\n",
    "\\x3c",
    "\\u00e9",
    "\n",
    "\t",
    "\r\n",
    "{",
    "}",
    "[",
    "]",
    "{text_input}",
    ": ",
    ", ",
    "None",
    "True",
    "null",
    "<",
    ">",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "</THINK>",
    "<image>",
    "||V^=^V||",
    "```json",
    "é",
    "naïve",
    "日本語",
    "עברית",
    "e\u0301",
    "\u200b",
    "\u2028",
    "\u00a0",
    "😀",
    "👩‍👩‍👧",
    "\U000e0001",
    "\U0010fffd",
    "\ufffd",
    "#",
    "%s",
    "{0}",
]


def text(rng: random.Random, most: int = 12) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, most)))


def optional(rng: random.Random) -> str | None:
    return rng.choice([None, "", text(rng)])


_THINK_TAGS = re.compile("</think>|<answer>", re.IGNORECASE)


def reasoning(rng: random.Random) -> str | None:
    """None, or a thought as a parser gives it back: stripped, without a closing think or answer tag."""
    if rng.random() < 0.2:
        return None
    thought = text(rng, 20)
    while _THINK_TAGS.search(thought):
        thought = _THINK_TAGS.sub("", thought)
    return thought.strip()


def plan(rng: random.Random) -> Plan:
    count = MAX_PLAN_STEPS if rng.random() < 0.005 else rng.randint(1, 8)
    steps = [
        PlanStep(
            step_number=rng.choice([i, rng.randint(0, MAX_STEP_NUMBER)]),
            step_name=optional(rng),
            instruction=optional(rng),
            prompt=optional(rng),
            auxiliary_text=optional(rng),
        )
        for i in range(1, count + 1)
    ]
    return Plan(steps=steps, reasoning=reasoning(rng))


def verdict(rng: random.Random) -> Verdict:
    return Verdict(success=rng.random() < 0.5, refine_prompt=text(rng), reasoning=reasoning(rng))


def test_a_formatted_plan_parses_back_to_itself() -> None:
    rng = random.Random(SEED)
    for _ in range(CASES):
        value = plan(rng)
        assert parse_plan(format_plan(value)) == value


def test_a_formatted_verdict_parses_back_to_itself() -> None:
    rng = random.Random(SEED + 1)
    for _ in range(CASES):
        value = verdict(rng)
        assert parse_verdict(format_verdict(value)) == value


def test_the_layout_is_the_released_models() -> None:
    step = PlanStep(
        step_number=1, step_name="S1", instruction="Draw a cat.", prompt="a cat", auxiliary_text=None
    )
    assert format_plan(Plan(steps=[step], reasoning="plan")) == (
        "<think>\nplan\n</think>\n<answer>\n{'execution_plan': [{'step_number': 1, 'step_name': 'S1', "
        "'instruction': 'Draw a cat.', 'prompt': 'a cat', 'auxiliary_text': None}]}\n</answer>"
    )
    assert format_verdict(Verdict(success=False, refine_prompt="the cat's tail", reasoning=None)) == (
        "<answer>\n{'previous_step_success': False, 'refine_prompt': \"the cat's tail\"}\n</answer>"
    )


def test_strings_are_written_as_python_writes_them_but_for_tags() -> None:
    """Printable ASCII without ``<`` is written exactly as ``repr`` writes it (what the release's
    models imitate); ``<`` is escaped so no text can close the answer."""
    rng = random.Random(SEED + 2)
    alphabet = [chr(c) for c in range(32, 127) if chr(c) != "<"] + ["\n", "\t", "\\"]
    for _ in range(CASES):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert literal(value) == repr(value)
    assert literal("a</answer>") == "'a\\x3c/answer>'"


def test_parsing_what_was_formatted_from_a_parse_gives_the_same_value() -> None:
    replies = [
        "<think>x</think>\n<answer>\n{'execution_plan': [{'step_number': '2', 'instruction': 'i', "
        "'prompt': \"it's p\", 'auxiliary_text': None},]}\n</answer>",
        '<answer>{"execution_plan": [{"step_number": 1.0, "instruction": null, "prompt": null, '
        '"auxiliary_text": "The answer is 4. \\ud83d\\ude00"}]}</answer>',
        "{'execution_plan': [{'step_number': 1, 'instruction': 'a <b>bold</b> step', 'prompt': 'p', 'auxiliary_text': 'x'}]}",
    ]
    for reply in replies:
        parsed = parse_plan(reply)
        assert parse_plan(format_plan(parsed)) == parsed
    for reply in [
        "<think>fine</think><answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>",
        "{'previous_step_success': False, 'refine_prompt': 'the cat's tail, curled',}",
    ]:
        parsed_verdict = parse_verdict(reply)
        assert parse_verdict(format_verdict(parsed_verdict)) == parsed_verdict


def _step(**fields: object) -> PlanStep:
    values: dict[str, object] = {"step_number": 1, "instruction": "i", "prompt": "p", "auxiliary_text": None}
    return PlanStep.model_validate({**values, **fields})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (Plan(steps=[]), "1 to 100 steps, not 0"),
        (Plan(steps=[_step()] * (MAX_PLAN_STEPS + 1)), "not 101"),
        (Plan(steps=[_step(step_number=MAX_STEP_NUMBER + 1)]), "outside 0-10000"),
        (Plan(steps=[_step(prompt="a\x00b")]), "control character"),
        (Plan(steps=[_step(step_name="\ud83d")]), "lone surrogate"),
        (Plan(steps=[_step(auxiliary_text="x " + MALFORMED_STEP_SIGNATURE)]), "parsing refuses"),
        (Plan(steps=[_step()], reasoning=" padded"), "surrounding space"),
        (Plan(steps=[_step()], reasoning="a </Think> b"), "</think>"),
    ],
)
def test_a_plan_no_reply_can_carry_is_refused(value: Plan, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        format_plan(value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (Verdict(success=True, refine_prompt="\x07"), "control character"),
        (Verdict(success=True, refine_prompt="", reasoning="x <ANSWER> y"), "<answer>"),
        (Verdict(success=True, refine_prompt="", reasoning="line\n"), "surrounding space"),
    ],
)
def test_a_verdict_no_reply_can_carry_is_refused(value: Verdict, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        format_verdict(value)
