"""Strings from models and users are cleaned before they are stored (issue 16, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interleave_thinker import Pipeline
from interleave_thinker.agents.critic import parse_verdict
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.core.errors import PlanningError
from interleave_thinker.core.sanitize import MANY_SURROGATES, clean_text, is_clean
from tests.helpers.pipelines import scripted_config, scripted_pipeline

CUT_EMOJI_PLAN = "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'smile \ud83d"
"""A planner reply cut inside an emoji, as a client that decodes JSON escapes hands it over."""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text, é 中 😀\t\n\r", "plain text, é 中 😀\t\n\r"),
        ("smile \ud83d", "smile \ufffd"),
        ("\ude00 lone low", "\ufffd lone low"),
        ("pair \ud83d\ude00 joined", "pair 😀 joined"),
        ("nul\x00 bell\x07 esc\x1b", "nul bell esc"),
        ("\ud83d\x00\ude00", "\ufffd\ufffd"),
    ],
)
def test_clean_text(text: str, expected: str) -> None:
    cleaned = clean_text(text)
    assert cleaned == expected
    assert is_clean(cleaned) and cleaned.encode("utf-8")
    assert clean_text(cleaned) == cleaned


def test_a_flood_of_surrogates_is_cleaned_in_one_pass() -> None:
    flood = "a\ud83d\ude00b" + "\udc00" * (MANY_SURROGATES + 1)
    cleaned = clean_text(flood)
    assert cleaned == "a??b" + "?" * (MANY_SURROGATES + 1) and is_clean(cleaned)


def test_retry_policy_stores_clean_replies() -> None:
    replies = iter(
        ["bad \ud83d\x00", "<answer>{'previous_step_success': True, 'refine_prompt': 'ok'}</answer>"]
    )
    outcome = RetryPolicy(max_attempts=2).run(lambda _t: next(replies), parse_verdict)
    assert outcome.value is not None and outcome.value.success is True
    assert outcome.raw_replies[0] == "bad \ufffd"
    json.dumps(outcome.raw_replies, ensure_ascii=False).encode("utf-8")


def accepting_pipeline(planner_reply: str) -> Pipeline:
    verdict = "<answer>{'previous_step_success': True, 'refine_prompt': 'ok'}</answer>"
    return scripted_pipeline(scripted_config(16, 1), planner_reply, verdict)


def test_run_with_a_bad_planner_reply_still_writes_its_trace(tmp_path: Path) -> None:
    with pytest.raises(PlanningError):
        accepting_pipeline(CUT_EMOJI_PLAN)("Draw a cat", out_dir=tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))
    assert trace["status"] == "failed"
    assert trace["planner"]["raw_replies"] == [CUT_EMOJI_PLAN.replace("\ud83d", "\ufffd")] * 3
    assert (tmp_path / "index.html").is_file() and (tmp_path / "document.md").is_file()


def test_prompt_with_undecodable_bytes_is_stored_clean(tmp_path: Path) -> None:
    """A command-line argument with invalid UTF-8 arrives with surrogate escapes (``\\udcff``)."""
    plan = "<answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>"
    result = accepting_pipeline(plan)("Draw a cat \udcff\x00", out_dir=tmp_path)
    assert result.ok and result.trace.request.text == "Draw a cat \ufffd"
    trace = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))
    assert trace["request"]["text"] == "Draw a cat \ufffd"
