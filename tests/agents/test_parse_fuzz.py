"""Seeded fuzzing of the three reply parsers (issue 16: items 2, 6, 7 and the fuzz acceptance).

Each parser gets 20,000 generated replies: mutations of valid replies (cut anywhere, lone surrogates
and control characters, contradictory values, huge numbers, deep nesting, tag storms, random
unicode) and, now and then, replies stretched up to 1 MB. Only :class:`ParseError` may escape,
every accepted value must be writable as JSON in UTF-8, and no reply may take 100 ms of CPU to parse.

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
from tests.helpers.fuzz import JUDGEMENTS, MAX_CHARS, PLANS, VERDICTS, _replies

SEED = 16
LIMIT_S = 0.1


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
    """The parse's CPU time on this thread, not the wall clock: a parser that backtracks burns CPU,
    while a busy machine (other work on the cores) only stretches the wall time."""
    start = time.thread_time()
    try:
        value = parse(reply)
    except ParseError:
        value = ParseError
    return time.thread_time() - start, value


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


# -- issue 41, item 11: leniency no wider than the release's json_repair --------------------------------

_GARBAGE = [
    "\x00",
    "\x01",
    "\x1f",
    "\ud800",
    "\udfff",
    "\ud83d\ude00",
    "ë",
    "ǳ",
    "é",
    " ",
    "\t",
    "x",
    "_",
    "1",
    "-",
]
_BOOLEANS = ["true", "false", "True", "False", "TRUE", "fAlSe"]


def _mangled(rng: random.Random) -> str:
    """A boolean with garbage put inside it, before or after it (one to three pieces)."""
    word = rng.choice(_BOOLEANS)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(word))
        word = word[:at] + rng.choice(_GARBAGE) + word[at:]
    return word


def test_a_boolean_is_read_only_where_json_repair_reads_the_same_boolean() -> None:
    """Every mangled ``previous_step_success`` the critic's reader accepts, json_repair (0.64.4, the release's
    reader; a test dependency only) reads as the same bool; the issue's two cases and a cut by a control
    character are refused. A value json_repair keeps as a string is never a verdict."""
    json_repair = pytest.importorskip("json_repair")
    rng = random.Random(SEED)
    cases = ["t\ud800ëue", "trueǳ", "tr\x00ue", "fal\x01se", "true\x00", *(_mangled(rng) for _ in range(800))]
    disagree, accepted = [], 0
    for word in cases:
        answer = "{'previous_step_success': " + word + ", 'refine_prompt': 'redo'}"
        repaired = json_repair.loads(answer)
        theirs = repaired.get("previous_step_success") if isinstance(repaired, dict) else None
        try:
            ours: bool | None = parse_verdict(f"<answer>{answer}</answer>").success
        except ParseError:
            continue
        accepted += 1
        if not (isinstance(theirs, bool) and theirs is ours):
            disagree.append((word, ours, theirs))
    assert disagree == []
    for word in ("t\ud800ëue", "trueǳ", "tr\x00ue", "fal\x01se", "true\x00"):
        with pytest.raises(ParseError):
            parse_verdict("<answer>{'previous_step_success': " + word + ", 'refine_prompt': 'redo'}</answer>")
    assert accepted > 0  # the table is not all refusals: the well-formed ones among them still read
