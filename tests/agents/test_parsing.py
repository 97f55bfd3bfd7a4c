from __future__ import annotations

from collections.abc import Callable

import pytest

from interleave_thinker.agents.critic import parse_verdict
from interleave_thinker.agents.judge import parse_judgement
from interleave_thinker.agents.planner import parse_plan
from interleave_thinker.agents.reply import MAX_REPLY_CHARS, extract_answer, extract_think
from interleave_thinker.core.errors import ParseError

STEP = "{'step_number': 1, 'step_name': 'Sketch', 'instruction': 'Draw a cat.', 'prompt': 'a cat sketch', 'auxiliary_text': None}"

# (reply, expected list of (step_number, prompt, auxiliary_text))
GOOD_PLANS = [
    (f"<think>ok</think><answer>{{'execution_plan': [{STEP}]}}</answer>", [(1, "a cat sketch", None)]),
    (f"<think>x</think>\n<answer>\n{{'execution_plan': [{STEP},]}}\n</answer>", [(1, "a cat sketch", None)]),
    (
        f"Here is my plan: <answer>{{'execution_plan': [{STEP}]}}</answer> Hope it helps.",
        [(1, "a cat sketch", None)],
    ),
    (f"{{'execution_plan': [{STEP}]}}", [(1, "a cat sketch", None)]),  # no tags at all
    (f"<think>reasoning</think>{{'execution_plan': [{STEP}]}}", [(1, "a cat sketch", None)]),  # only think
    (
        '<answer>{"execution_plan": [{"step_number": 1, "instruction": "i", "prompt": "p", "auxiliary_text": null}]}</answer>',
        [(1, "p", None)],
    ),
    (
        "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': 'p1', 'auxiliary_text': 'Note'},"
        " {'step_number': 2, 'instruction': 'j', 'prompt': \"it's p2\", 'auxiliary_text': None}]}</answer>",
        [(1, "p1", "Note"), (2, "it's p2", None)],
    ),
    (
        "<answer>{'execution_plan': [{'step_number': '2', 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>",
        [(2, "p", None)],
    ),
    (
        "<ANSWER>{'execution_plan': [{'step_number': 1, 'instruction': None, 'prompt': None, 'auxiliary_text': 'The answer is 4.'}]}</ANSWER>",
        [(1, None, "The answer is 4.")],
    ),
    (
        "<answer>[{'step_number': 1, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]</answer>",
        [(1, "p", None)],
    ),
    (
        "<think>a</think><answer>{'execution_plan': [{'step_number': 1.0, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>",
        [(1, "p", None)],
    ),
    # truncated after the last complete step: the reader closes the brackets
    (
        "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}",
        [(1, "p", None)],
    ),
]

BAD_PLANS = [
    ("", "no JSON"),
    ("I cannot help with that.", "no JSON"),
    ("<think>only thinking, no answer", "no JSON"),
    ("<answer>{'plan': []}</answer>", "no 'execution_plan'"),
    ("<answer>{'execution_plan': []}</answer>", "non-empty"),
    ("<answer>{'execution_plan': 'draw a cat'}</answer>", "non-empty list"),
    (
        "<answer>{'execution_plan': [{'step_number': 1, 'prompt': 'p', 'auxiliary_text': None}]}</answer>",
        "lacks instruction",
    ),
    (
        "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': 'p'}]}</answer>",
        "lacks auxiliary_text",
    ),
    (
        "<answer>{'execution_plan': [{'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>",
        "lacks step_number",
    ),
    (
        "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': \"p None}, {'step_number': 2, 'prompt': 'q'\", 'auxiliary_text': None}]}</answer>",
        "folded",
    ),
    (
        "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': ['p'], 'auxiliary_text': None}]}</answer>",
        "must be a string",
    ),
    (
        "<answer>{'execution_plan': [{'step_number': 'one', 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>",
        "integer",
    ),
    (
        "<answer>{'execution_plan': [{'step_number': True, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>",
        "integer",
    ),
    ("<answer>{'execution_plan': ['step one']}</answer>", "not a dict"),
    ("<answer>42</answer>", "no JSON"),
]

GOOD_VERDICTS = [
    (
        "<think>fine</think><answer>{'previous_step_success': True, 'refine_prompt': 'a cat'}</answer>",
        True,
        "a cat",
    ),
    (
        "<think>bad</think>\n<answer>\n{'previous_step_success': False, 'refine_prompt': 'a cat, orange'}\n</answer>",
        False,
        "a cat, orange",
    ),
    ('<answer>{"previous_step_success": false, "refine_prompt": "x"}</answer>', False, "x"),
    (
        "Sure. <answer>{'previous_step_success': True, 'refine_prompt': \"the cat's tail\"}</answer> done",
        True,
        "the cat's tail",
    ),
    ("{'previous_step_success': False, 'refine_prompt': 'no tags'}", False, "no tags"),
    ("<answer>{'previous_step_success': True, 'refine_prompt': '',}</answer>", True, ""),
    ("<answer>{'previous_step_success': False, 'refine_prompt': 'truncated prom", False, "truncated prom"),
]

BAD_VERDICTS = [
    ("<answer>{'previous_step_success': 'True', 'refine_prompt': 'x'}</answer>", "True or False"),
    ("<answer>{'previous_step_success': 1, 'refine_prompt': 'x'}</answer>", "True or False"),
    ("<answer>{'previous_step_success': None, 'refine_prompt': 'x'}</answer>", "True or False"),
    ("<answer>{'previous_step_success': True, 'refine_prompt': None}</answer>", "must be a string"),
    ("<answer>{'previous_step_success': True, 'refine_prompt': ['a']}</answer>", "must be a string"),
    ("<answer>{'refine_prompt': 'x'}</answer>", "True or False"),
    ("<answer>{'previous_step_success': True}</answer>", "must be a string"),
    ("The image looks great!", "no JSON"),
    ("<answer>[1, 2]</answer>", "not a dict"),
]


@pytest.mark.parametrize(("reply", "expected"), GOOD_PLANS)
def test_good_plans(reply: str, expected: list[tuple[int, str | None, str | None]]) -> None:
    plan = parse_plan(reply)
    assert [(s.step_number, s.prompt, s.auxiliary_text) for s in plan.steps] == expected


@pytest.mark.parametrize(
    ("parse", "reply", "problem"),
    [(parse_plan, *case) for case in BAD_PLANS] + [(parse_verdict, *case) for case in BAD_VERDICTS],
)
def test_bad_replies_raise_with_raw(parse: Callable[[str], object], reply: str, problem: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(reply)
    assert problem in str(info.value)
    assert info.value.raw == reply


@pytest.mark.parametrize(("reply", "success", "refine"), GOOD_VERDICTS)
def test_good_verdicts(reply: str, success: bool, refine: str) -> None:
    verdict = parse_verdict(reply)
    assert (verdict.success, verdict.refine_prompt) == (success, refine)


def test_reasoning_is_kept() -> None:
    assert (
        parse_verdict(
            "<think> looks off </think><answer>{'previous_step_success': False, 'refine_prompt': 'y'}</answer>"
        ).reasoning
        == "looks off"
    )
    plan = parse_plan(f"<think>two steps</think><answer>{{'execution_plan': [{STEP}]}}</answer>")
    assert plan.reasoning == "two steps"
    assert plan.steps[0].step_name == "Sketch"


def test_extract_answer_variants() -> None:
    assert extract_answer("<think>t</think><answer> A </answer>") == "A"
    assert extract_answer("<think>t</think> B ") == "B"
    assert extract_answer("<answer>C") == "C"


def test_none_string_auxiliary_text_is_not_output() -> None:
    plan = parse_plan(
        "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'Draw.', 'prompt': 'p', 'auxiliary_text': 'None'}]}</answer>"
    )
    assert plan.steps[0].output_text == "Draw."


def test_never_eval(tmp_path: object) -> None:
    reply = "<answer>{'execution_plan': [{'step_number': __import__('os').getpid(), 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>"
    with pytest.raises(ParseError):
        parse_plan(reply)


def plan_with(field: str) -> str:
    step = f"{{'step_number': {field}, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}}"
    return f"<answer>{{'execution_plan': [{step}]}}</answer>"


@pytest.mark.parametrize(
    ("step_number", "problem"),
    [
        ("'" + "9" * 5000 + "'", "must be an integer"),  # was a ValueError from int()
        ("9" * 5000, "a number of 5000 characters"),  # was a ValueError from the literal parsers
        ("'\u00b2'", "must be an integer"),  # '²'.isdigit() is True, int('²') a ValueError
        ("1e300", "must be an integer"),
        ("10001", "outside 0-10000"),
        ("-1", "outside 0-10000"),
        ("float('nan')", "unquoted word"),
    ],
)
def test_step_numbers_out_of_bounds_are_parse_errors(step_number: str, problem: str) -> None:
    with pytest.raises(ParseError, match=problem):
        parse_plan(plan_with(step_number))


def test_huge_json_step_number_is_a_parse_error() -> None:
    reply = (
        '{"execution_plan": [{"step_number": %s, "instruction": "i", "prompt": "p", "auxiliary_text": null}]}'
    )
    with pytest.raises(ParseError):
        parse_plan(reply % ("9" * 5000))
    with pytest.raises(ParseError, match="outside"):
        parse_plan(reply % ("9" * 4000))


CONTRADICTIONS = [
    "True and False",
    "False or True",
    "-True",
    "+True",
    "not False",
    "True False",
    "Truee",
    "(True)",
    "True if x else False",
    "__import__('os')",
]


@pytest.mark.parametrize("value", CONTRADICTIONS)
def test_invented_or_contradictory_verdicts_are_rejected(value: str) -> None:
    reply = f"<answer>{{'previous_step_success': {value}, 'refine_prompt': 'x'}}</answer>"
    with pytest.raises(ParseError) as info:
        parse_verdict(reply)
    assert info.value.raw == reply


@pytest.mark.parametrize(
    "reply",
    [
        "<answer>{'previous_step_success': True, 'previous_step_success': False, 'refine_prompt': 'x'}</answer>",
        '{"previous_step_success": true, "previous_step_success": false, "refine_prompt": "x"}',
        "<answer>{'previous_step_success': True, 'refine_prompt': 'x'}, {'previous_step_success': False, 'refine_prompt': 'y'}</answer>",
        "<answer>[{'previous_step_success': True, 'refine_prompt': 'x'}] [{'previous_step_success': False}]</answer>",
        "<answer>{'previous_step_success': True, 'refine_prompt': x}</answer>",
    ],
)
def test_ambiguous_verdicts_are_rejected(reply: str) -> None:
    with pytest.raises(ParseError):
        parse_verdict(reply)


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ('{"score"-1: [7, 4]}', "expected ':' after the key 'score'"),  # was score [1.0]
        ('{"score": [7, 4', "cut off"),  # the list may have gone on (and 4 may have been 45)
        ('{"score": [7, 4,', "cut off"),
        ('{"score": 7', "empty"),  # 7 may have been the start of 70 or 7.5
        ('{"score": [7, 4] "reasoning": "x"}', "expected ','"),
        ('{"score": [7, 4], "score": [9, 9]}', "twice"),
        ('{"score": [-True, 4]}', "unexpected"),
        ('{"score": [7, 4 and 9]}', "expected ','"),
        ('{"score": [' + "1, " * 11 + "1]}", "more than 10"),
        ('{"score": [1e999, 4]}', "outside 0-10"),
        ('{"score": [NaN, 4]}', "outside 0-10"),
    ],
)
def test_judgements_never_invent_scores(reply: str, problem: str) -> None:
    with pytest.raises(ParseError, match=problem):
        parse_judgement(reply)


# Valid answers in the models' dialect that strict JSON and Python literals both refuse.
DIALECT = [
    (
        "<answer>{'previous_step_success': False, 'refine_prompt': 'make the cat's tail orange'}</answer>",
        "make the cat's tail orange",
    ),
    ('<answer>{previous_step_success: false, refine_prompt: "x",}</answer>', "x"),
    (
        "<answer>{'previous_step_success': False, 'refine_prompt': 'a\\nb \\u00e9 \\x41 \\/ \\q'}</answer>",
        "a\nb é A / \\q",
    ),
    (
        "<answer>{'previous_step_success': False, 'refine_prompt': \"it's \\\"quoted\\\"\"}</answer>",
        'it\'s "quoted"',
    ),
]


@pytest.mark.parametrize(("reply", "refine"), DIALECT)
def test_dialect_slips_are_read_as_meant(reply: str, refine: str) -> None:
    assert parse_verdict(reply).refine_prompt == refine


@pytest.mark.parametrize(
    ("reply", "refine"),
    [
        ('{"previous_step_success": false, "refine_prompt": "smile \\ud83d"}', "smile \ufffd"),
        (
            "{'previous_step_success': False, 'refine_prompt': 'smile \\ud83d",
            "smile \ufffd",
        ),  # cut in an emoji
        ("{'previous_step_success': False, 'refine_prompt': 'smile \\ud83d\\ude0", "smile \ufffd"),
        ('{"previous_step_success": false, "refine_prompt": "\\ud83d\\ude00 ok"}', "😀 ok"),
        ('{"previous_step_success": false, "refine_prompt": "nul\\u0000 here"}', "nul here"),
        ("{'previous_step_success': False, 'refine_prompt': 'raw \ud83d and \x00'}", "raw \ufffd and "),
    ],
)
def test_accepted_strings_are_clean(reply: str, refine: str) -> None:
    verdict = parse_verdict(reply)
    assert verdict.refine_prompt == refine
    verdict.model_dump_json().encode("utf-8")


def test_every_accepted_plan_field_is_clean() -> None:
    reply = (
        '<think>why \ud83d</think><answer>{"execution_plan": [{"step_number": 1, "step_name": "n\\udc00", '
        '"instruction": "i\\u0001", "prompt": "p\\ud800", "auxiliary_text": "a\\u0000"}]}</answer>'
    )
    plan = parse_plan(reply)
    step = plan.steps[0]
    assert (step.step_name, step.instruction, step.prompt, step.auxiliary_text) == (
        "n\ufffd",
        "i",
        "p\ufffd",
        "a",
    )
    assert plan.reasoning == "why \ufffd"
    plan.model_dump_json().encode("utf-8")
    scores, reasoning = parse_judgement('{"score": [7, 4], "reasoning": "r\\udfff\\u0000"}')
    assert (scores, reasoning) == ([7.0, 4.0], "r\ufffd")


def test_replies_over_the_limit_are_rejected() -> None:
    verdict = "<answer>{'previous_step_success': True, 'refine_prompt': 'x'}</answer>"
    long = verdict + " " * (MAX_REPLY_CHARS - len(verdict))
    assert parse_verdict(long).success is True
    for parse in (parse_plan, parse_verdict, parse_judgement):
        with pytest.raises(ParseError, match="over the limit"):
            parse(long + " ")


def test_think_blocks_are_cut_as_before() -> None:
    assert extract_answer("<think>a</think>{x}<THINK>b</Think> y") == "{x} y"
    assert extract_answer("<think>a<think>b</think>{x}") == "{x}"
    assert extract_answer("{x}<think>never closed <think> again") == "{x}"
    assert extract_answer("<answer>A</answer><answer>B</answer>") == "A"
    assert extract_answer("<answer>" * 3 + "{x}") == "<answer><answer>{x}"
    assert extract_think("<think>one</think><think>two</think>") == "one"
    assert extract_think("<think>open") is None
    assert extract_answer("é<tHiNk>中</think>😀") == "é😀"


def test_cut_plans_keep_only_what_was_written() -> None:
    head = "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None"
    assert len(parse_plan(head).steps) == 1  # a constant is complete even at the very end
    assert len(parse_plan(head + "}, {").steps) == 1  # a step not begun is no step
    with pytest.raises(ParseError, match="step 2 lacks"):
        parse_plan(head + "}, {'step_number': 2, 'instruction': 'j'")  # a step begun must be whole
    with pytest.raises(ParseError, match="lacks auxiliary_text"):
        parse_plan(head[: -len(" None")])  # the value was never written: nothing is invented


def test_a_valid_megabyte_verdict_is_accepted() -> None:
    refine = "orange cat, " * 84_000
    reply = f"<think>{'t' * 1000}</think><answer>{{'previous_step_success': False, 'refine_prompt': '{refine}'}}</answer>"
    verdict = parse_verdict(reply)
    assert len(reply) > 1_000_000 and verdict.refine_prompt == refine and verdict.reasoning == "t" * 1000
