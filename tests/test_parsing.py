from __future__ import annotations

import pytest

from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.parsing import extract_answer, parse_plan, parse_verdict

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
    # truncated after the last complete step: json-repair closes the brackets
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


@pytest.mark.parametrize(("reply", "problem"), BAD_PLANS)
def test_bad_plans_raise_with_raw(reply: str, problem: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_plan(reply)
    assert problem in str(info.value)
    assert info.value.raw == reply


@pytest.mark.parametrize(("reply", "success", "refine"), GOOD_VERDICTS)
def test_good_verdicts(reply: str, success: bool, refine: str) -> None:
    verdict = parse_verdict(reply)
    assert (verdict.success, verdict.refine_prompt) == (success, refine)


@pytest.mark.parametrize(("reply", "problem"), BAD_VERDICTS)
def test_bad_verdicts_raise_with_raw(reply: str, problem: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_verdict(reply)
    assert problem in str(info.value)
    assert info.value.raw == reply


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
