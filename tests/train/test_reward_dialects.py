"""The rewards read answers with the release's leniency (issue 29, item 3), bounded and in linear time.

The table: replies in the dialects the released models write, each with the value the release's
critic reward gives it (``interleave_thinker_reward.py``: ``tag_format_reward`` and
``accuracy_reward`` over ``json_repair.loads``). The release values were worked out from that code and
from ``json_repair``'s documented behaviour, and are checked against ``json_repair`` 0.64.4 itself (a dev
dependency) read as the release reads it (:func:`release_reading`). One row records where this reader
deliberately stops short of ``json_repair`` (it guesses no missing comma): there the release's value is
kept beside ours.

The fuzz: 20,000 seeded replies (the agents' parser fuzz's generator, issue 16, fed to the rewards'
reading instead) must never raise and each must be read in under 100 ms, the issue's figure. A reply
over the bound is measured again (best of three) before the test fails, as in test_parse_fuzz.py: a
shared machine can stall any call. Linear time itself is checked without a clock: the release's
quadratic shapes (runs of spaces, runs of ``</think><answer>``) are in the generated set, and the
linear rewrites are checked to give the release's pattern's results on random short texts.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from interleave_thinker.train.rewards import (
    critic_accuracy_reward,
    critic_format_reward,
    planner_format_reward,
)
from interleave_thinker.train.rewards.answers import (
    MAX_COMPLETION_CHARS,
    normalize_response,
    read_critic,
    think_then_answer,
)
from tests.helpers.fuzz import PLANS, VERDICTS, _replies

LIMIT_S = 0.1
REPLIES = 20_000


@dataclass(frozen=True)
class Row:
    name: str
    answer: str
    truth: bool
    release: tuple[float, float]  # format, accuracy: what the release's reward gives
    ours: tuple[float, float] | None = None  # only where this reader deliberately differs
    refine: str | None = None  # the refine prompt read, when the format passes


def wrap(answer: str) -> str:
    return f"<think>The hat is missing.</think>\n<answer>\n{answer}\n</answer>"


ROWS = [
    Row("python literal", "{'previous_step_success': True, 'refine_prompt': ''}", True, (1, 1), refine=""),
    Row("strict JSON", '{"previous_step_success": false, "refine_prompt": "x"}', False, (1, 1), refine="x"),
    Row(
        "lowercase true in a python dict",
        "{'previous_step_success': true, 'refine_prompt': ''}",
        True,
        (1, 1),
        refine="",
    ),
    Row(
        "lowercase false in a python dict",
        "{'previous_step_success': false, 'refine_prompt': 'add a red hat'}",
        False,
        (1, 1),
        refine="add a red hat",
    ),
    Row(
        "JSON trailing comma",
        '{"previous_step_success": false, "refine_prompt": "add a red hat",}',
        False,
        (1, 1),
        refine="add a red hat",
    ),
    Row(
        "python trailing comma with lowercase false",
        "{'previous_step_success': false, 'refine_prompt': 'x',}",
        False,
        (1, 1),
        refine="x",
    ),
    Row(
        "single and double quotes mixed",
        '{"previous_step_success": true, \'refine_prompt\': "keep the hat"}',
        True,
        (1, 1),
        refine="keep the hat",
    ),
    Row(
        "closing brace missing",
        "{'previous_step_success': false, 'refine_prompt': 'add a red hat'",
        False,
        (1, 1),
        refine="add a red hat",
    ),
    Row(
        "closing quote and brace missing",
        "{'previous_step_success': False, 'refine_prompt': 'add a red hat",
        False,
        (1, 1),
        refine="add a red hat",
    ),
    Row("TRUE in capitals", "{'previous_step_success': TRUE, 'refine_prompt': ''}", True, (1, 1), refine=""),
    Row(
        "unquoted keys",
        '{previous_step_success: false, refine_prompt: "add a red hat"}',
        False,
        (1, 1),
        refine="add a red hat",
    ),
    Row(
        "an apostrophe inside a single-quoted string",
        "{'previous_step_success': False, 'refine_prompt': 'the cat's tail, curled'}",
        False,
        (1, 1),
        refine="the cat's tail, curled",
    ),
    Row(
        "code fence around the answer",
        '```json\n{"previous_step_success": true, "refine_prompt": ""}\n```',
        True,
        (1, 1),
        refine="",
    ),
    Row(
        "whitespace around / in the prompt is normalised away",
        "{'previous_step_success': false, 'refine_prompt': 'a cat / dog < b'}",
        False,
        (1, 1),
        refine="a cat/dog<b",
    ),
    Row(
        "success as 1: not a bool, but 1 == True",
        "{'previous_step_success': 1, 'refine_prompt': ''}",
        True,
        (0, 1),
    ),
    Row("success as a string", "{'previous_step_success': 'True', 'refine_prompt': ''}", True, (0, 0)),
    Row("empty dict", "{}", True, (0, 0)),
    Row("a list, not a dict", "[{'previous_step_success': True, 'refine_prompt': ''}]", True, (0, 0)),
    # json_repair 0.64.4 reads the bare word None as None: not a string, so the format fails there too
    Row(
        "python None as the refine prompt",
        "{'previous_step_success': True, 'refine_prompt': None}",
        True,
        (0, 1),
    ),
    # json_repair's further slips, read the same way here (issue 40)
    Row(
        "a key given twice keeps its last value",
        "{'previous_step_success': True, 'previous_step_success': False, 'refine_prompt': 'x'}",
        False,
        (1, 1),
        refine="x",
    ),
    Row(
        "a key given twice in strict JSON",
        '{"previous_step_success": true, "refine_prompt": "a", "refine_prompt": "b"}',
        True,
        (1, 1),
        refine="b",
    ),
    Row(
        "a # comment between items",
        "{'previous_step_success': True, # the hat is there\n 'refine_prompt': ''}",
        True,
        (1, 1),
        refine="",
    ),
    Row(
        "a # comment before the comma",
        "{'previous_step_success': False # no hat\n, 'refine_prompt': 'add a hat'}",
        False,
        (1, 1),
        refine="add a hat",
    ),
    Row(
        "a // comment",
        "{'previous_step_success': True, // ok\n 'refine_prompt': ''}",
        True,
        (1, 1),
        refine="",
    ),
    Row(
        "a /* */ comment",
        "{'previous_step_success': True, /* ok */ 'refine_prompt': ''}",
        True,
        (1, 1),
        refine="",
    ),
    Row(
        "a # inside a string is text",
        "{'previous_step_success': False, 'refine_prompt': 'paint #3 red'}",
        False,
        (1, 1),
        refine="paint #3 red",
    ),
    Row(
        "True and False reads as True",
        "{'previous_step_success': True and False, 'refine_prompt': ''}",
        True,
        (1, 1),
    ),
    Row(
        "False or True reads as False",
        "{'previous_step_success': False or True, 'refine_prompt': ''}",
        True,
        (1, 0),
    ),
    Row("1 and 2 reads as 1", "{'previous_step_success': 1 and 2, 'refine_prompt': ''}", True, (0, 1)),
    Row(
        "an unquoted word: a string there, refused here",
        "{'previous_step_success': yes, 'refine_prompt': ''}",
        True,
        (0, 0),
    ),
    # json_repair inserts a missing comma; this reader does not guess where one belongs
    Row(
        "comma missing between items",
        "{'previous_step_success': False 'refine_prompt': 'x'}",
        False,
        (1, 1),
        ours=(0, 0),
    ),
]
WHOLE_REPLIES = [  # rows whose tags matter, given as the whole reply
    Row(
        "no think block",
        "<answer>{'previous_step_success': false, 'refine_prompt': 'x'}</answer>",
        False,
        (1, 1),
        refine="x",
    ),
    Row(
        "think after the answer",
        "<answer>{'previous_step_success': false, 'refine_prompt': 'x'}</answer><think>late</think>",
        False,
        (0, 1),
    ),
    Row(
        "no closing answer tag",
        "<think>t</think><answer>{'previous_step_success': false, 'refine_prompt': 'x'}",
        False,
        (0, 0),
    ),
    Row(  # the format check finds tags in any case, the answer is read from lowercase tags only
        "answer tags in capitals",
        "<think>t</think><ANSWER>{'previous_step_success': true, 'refine_prompt': ''}</ANSWER>",
        True,
        (0, 0),
    ),
    Row(
        "spaces inside the tags",
        "< think > t < / think >\n< answer > {'previous_step_success': true, 'refine_prompt': ''} < / answer >",
        True,
        (1, 1),
        refine="",
    ),
]
TABLE = [(r, wrap(r.answer)) for r in ROWS] + [(r, r.answer) for r in WHOLE_REPLIES]


@pytest.mark.parametrize(("row", "reply"), TABLE, ids=[r.name for r, _ in TABLE])
def test_critic_reward_reads_the_release_dialects(row: Row, reply: str) -> None:
    """Ours as the table says; the table's release column is what the release's reading gives, checked
    by :func:`test_the_release_column_is_what_json_repair_gives`."""
    expected = row.ours or row.release
    truth = [{"success": row.truth, "semantics": 5, "quality": 5}]
    assert critic_format_reward(None, [reply]) == [expected[0]]
    assert critic_accuracy_reward(None, [reply], ground_truth=truth) == [expected[1]]
    reading = read_critic(reply)
    if row.refine is not None:
        assert reading.format_ok and reading.refine_prompt == row.refine


def release_reading(reply: str, truth: bool, json_repair: Any) -> tuple[float, float]:
    """(format, accuracy) as the release's reward computes them (``compute_score``, ``tag_format_reward``,
    ``extract_answer``, ``accuracy_reward`` of ``interleave_thinker_reward.py``), written here from that code."""
    response = re.sub(r"\s*(<|>|/)\s*", r"\1", reply)
    found = re.search(r"<answer>(.*?)</answer>", response, re.DOTALL)
    answer = json_repair.loads(found.group(1).strip()) if found else None
    tags = re.search(r"<answer>.*?</answer>", response, re.DOTALL | re.IGNORECASE)
    think = re.search(r"<think>", response, re.IGNORECASE)
    opening = re.search(r"<answer>", response, re.IGNORECASE)
    ordered = tags is not None and (think.start() if think else -1) < (opening.start() if opening else -1)
    read: dict[str, Any] = answer if isinstance(answer, dict) else {}
    typed = (
        "previous_step_success" in read
        and "refine_prompt" in read
        and isinstance(read["previous_step_success"], bool)
        and isinstance(read["refine_prompt"], str)
    )
    predicted = read.get("previous_step_success", -1)
    accuracy = 0.0 if predicted == -1 else float(predicted == truth)
    return (1.0 if ordered and typed else 0.0), accuracy


RELEASE_RAISES = {"a list, not a dict"}
"""Rows whose answer is no dict: the release's ``answer_all.get`` raises there (UPSTREAM corrections, 8)."""


@pytest.mark.parametrize(("row", "reply"), TABLE, ids=[r.name for r, _ in TABLE])
def test_the_release_column_is_what_json_repair_gives(row: Row, reply: str) -> None:
    """json_repair 0.64.4 (the dev pin; the release pins none) read as the release reads it."""
    json_repair = pytest.importorskip("json_repair")
    if row.name in RELEASE_RAISES:
        return
    assert release_reading(reply, row.truth, json_repair) == row.release


PLAN_STEP = "'step_number': 1, 'instruction': 'Draw a cat.', 'prompt': 'a cat'"


def plan(aux: str, tail: str = "]}") -> str:
    return "{'execution_plan': [{" + PLAN_STEP + ", 'auxiliary_text': " + aux + tail


PLANNER_TABLE = [
    ("python literal", plan("None}"), 1.0),
    ("lowercase null, trailing commas", plan("null},", "],}"), 1.0),
    (
        "quotes mixed",
        '{"execution_plan": [{"step_number": 1, "instruction": \'Draw a cat.\', "prompt": "a cat", '
        "'auxiliary_text': None}]}",
        1.0,
    ),
    ("closing brace missing", plan("None}", "]"), 1.0),
    ("no steps", "{'execution_plan': []}", 0.0),
]


@pytest.mark.parametrize(("name", "answer", "expected"), PLANNER_TABLE, ids=[n for n, _, _ in PLANNER_TABLE])
def test_planner_format_reward_reads_the_same_dialects(name: str, answer: str, expected: float) -> None:
    assert planner_format_reward(None, [f"<think>Plan.</think>\n<answer>\n{answer}\n</answer>\n"]) == [
        expected
    ]


RELEASE_NORMALIZE = re.compile(r"\s*(<|>|/)\s*")  # the release's pattern, as the reference on short texts
SHAPE = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)  # the old planner check


def test_linear_rewrites_agree_with_the_patterns_they_replace() -> None:
    rng = random.Random(29)
    spaces = [" ", "\n", "\t", "\x1c", "\x85", "\xa0", "\u2028", "\u3000"]
    pieces = [*spaces, "<", ">", "/", "a", "\u200b", "<think>", "</think>", "<answer>", "</answer>"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 14)))
        assert normalize_response(text) == RELEASE_NORMALIZE.sub(r"\1", text), repr(text)
        assert think_then_answer(text) == bool(SHAPE.match(text)), repr(text)


def _timed(parse: Callable[[str], object], reply: str) -> float:
    start = time.perf_counter()
    parse(reply)
    return time.perf_counter() - start


def _critic(reply: str) -> float:
    reading = read_critic(reply)
    return reading.accuracy(True)


def _planner(reply: str) -> list[float]:
    return planner_format_reward(None, [reply])


def test_rewards_read_generated_replies_without_error_in_bounded_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = random.Random("29-rewards")
    replies = _replies(rng, VERDICTS + PLANS)[:REPLIES]
    size = MAX_COMPLETION_CHARS
    replies += [  # the shapes that are quadratic in the release's patterns and the old planner check
        ("<think>" + "</think><answer>" * size)[:size],
        "<answer>" + " " * (size - 9) + "x",
        "a" + " \t" * (size // 2 - 1) + "b",
        ("< " * size)[:size],
        ("<answer>" * size)[:size],
        ("ab, cd / x <y> " * size)[:size],
    ]
    errors, slow, slowest = [], [], (0.0, "", "")
    for reply in replies:
        for name, parse in (("critic", _critic), ("planner", _planner)):
            try:
                elapsed = _timed(parse, reply)
            except Exception as exc:  # the point of the test: a reward never raises on a reply
                errors.append(f"{name}: {type(exc).__name__}: {exc!s:.100} <- {reply[:80]!r}")
                continue
            slowest = max(slowest, (elapsed, name, reply[:60]))
            if elapsed > LIMIT_S:
                slow.append((parse, reply))
    still_slow = [
        f"{len(r)} chars: {r[:60]!r}" for p, r in slow if min(_timed(p, r) for _ in range(3)) > LIMIT_S
    ]
    with capsys.disabled():
        print(
            f"\nrewards: {len(replies)} replies, slowest {slowest[0] * 1000:.1f} ms ({slowest[1]}, {slowest[2]!r})"
        )
    assert len(replies) >= REPLIES
    assert errors == [], errors[:5]
    assert still_slow == [], still_slow[:5]
    formats = [read_critic(r).format_ok for r in replies[:2000]]
    assert 100 < sum(formats) < 1900  # the generator exercises both outcomes


def test_a_rollout_over_the_bound_reads_as_one_without_an_answer() -> None:
    valid = wrap("{'previous_step_success': False, 'refine_prompt': 'x'}")
    padded = " " * (MAX_COMPLETION_CHARS - len(valid)) + valid
    assert read_critic(padded).format_ok and read_critic(padded).refine_prompt == "x"
    over = " " + padded
    assert not read_critic(over).format_ok and read_critic(over).accuracy(False) == 0.0
