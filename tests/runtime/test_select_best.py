"""Best attempt kept (loop.select_best): when the critic accepts no attempt of a step, the critic's
ranking or the judge's SC/PQ picks the attempt kept; 'off' keeps the release's trace byte for byte."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.ranking import format_ranking, parse_ranking
from interleave_thinker.agents.seeds import call_seed
from interleave_thinker.core.errors import ConfigError, ParseError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.run_folder import trace_json
from interleave_thinker.core.types import Trace
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.replies import accepting, plan_reply, scripted_config, verdict

REPO = Path(__file__).resolve().parents[2]
RELEASE_TRACES = REPO / "tests" / "fixtures" / "release_traces" / "forced_and_rejected.json"
"""Two traces written before loop.select_best existed (the scenario of :func:`release_scenario`)."""

PLAN = plan_reply(("Draw a cat.", "a cat", None), ("Colour it.", "orange cat", None))


def build(critic: list[Any], *, judge: list[str] | None = None, **loop: Any) -> dict[str, Any]:
    config = scripted_config(loop, **({"judge": "scripted:j"} if judge is not None else {}))
    built: dict[str, Any] = {
        "planner": ScriptedVLMBackend([PLAN]),
        "critic": ScriptedVLMBackend(critic),
        "generator": ScriptedImageBackend(),
    }
    backend = ScriptedVLMBackend(judge) if judge is not None else None
    scorer = Judge(backend, builtin_templates()) if backend is not None else None
    built["pipe"] = Pipeline(**built, config=config, templates=builtin_templates(), judge=scorer)
    if backend is not None:
        built["judge"] = backend
    return built


def normalised(trace: Trace) -> str:
    """The trace without what differs between two runs of one scenario (times)."""
    trace.created_at, trace.duration_s, trace.planner.duration_s = "T", 0.0, 0.0
    for step in trace.steps:
        for attempt in step.attempts:
            attempt.durations.generate_s = attempt.durations.critic_s = 0.0
    return trace_json(trace) + "\n"


def release_scenario(**loop: Any) -> str:
    """Step 1 rejected (forced, or with the critic on the last attempt too), step 2 accepted."""
    texts = []
    for critic_last in (False, True):
        critic = [verdict(False, "a cat, clearer"), verdict(False, "a cat, bigger"), verdict(False, "x")]
        built = build([*critic, verdict(True), verdict(True)], critic_on_last_attempt=critic_last, **loop)
        texts.append(normalised(built["pipe"]("Draw a cat", out_dir=tempfile.mkdtemp()).trace))
    return "".join(texts)


def test_off_writes_the_release_trace_byte_for_byte() -> None:
    expected = RELEASE_TRACES.read_text(encoding="utf-8")
    assert release_scenario() == expected
    assert release_scenario(select_best="off", repair_budget=0) == expected


def test_critic_ranking_keeps_the_attempt_ranked_first(tmp_path: Path) -> None:
    rejected = [verdict(False, "a cat, clearer"), verdict(False, "a cat, bigger")]
    ranking = format_ranking([2, 3, 1], "the only sharp cat")
    built = build([*rejected, ranking, verdict(True)], select_best="critic")
    result = built["pipe"]("Draw a cat", out_dir=tmp_path)
    assert result.ok
    step = result.trace.steps[0]
    assert [(a.attempt, a.accepted, a.forced) for a in step.attempts] == [
        (0, False, False),
        (1, True, True),
        (2, False, False),
    ]
    assert step.accepted_image == "step01_attempt1.png"
    assert step.selected is not None and (step.selected.attempt, step.selected.by) == (1, "critic")
    assert step.selected.reason == "ranked first of 3 (ranking [2, 3, 1]): the only sharp cat"
    assert step.selected.raw_replies == [ranking]
    assert step.selected.seeds == [call_seed(0, "ranker", 1, 0, 0)]
    ranking_call = built["critic"].calls[2]  # one call: before + the three attempts, then our text
    images = ScriptedVLMBackend.images_in(ranking_call)
    outputs = [built["generator"].calls[i] for i in range(3)]
    assert len(images) == 4 and images[0].getextrema() == ((255, 255),) * 3
    assert [im.tobytes() for im in images[1:]] == [
        result.images[a.image_file].tobytes() for a in step.attempts
    ]
    assert 'meant to achieve: "a cat"' in ScriptedVLMBackend.text_in(ranking_call)  # the planned prompt
    # the next step edits the kept image, and the page shows it
    assert outputs[0].prompt == "a cat" and built["generator"].calls[3].image is not None
    assert built["generator"].calls[3].image.tobytes() == result.images["step01_attempt1.png"].tobytes()
    assert "images/step01_attempt1.png" in (tmp_path / "document.md").read_text(encoding="utf-8")
    assert '"selected": {' in (tmp_path / "trace.json").read_text(encoding="utf-8")


def test_critic_ranking_also_applies_when_the_critic_rejected_the_last_attempt() -> None:
    rejected = [verdict(False, "b"), verdict(False, "c"), verdict(False, "d")]
    built = build(
        [*rejected, format_ranking([1], "closest"), verdict(True)],
        select_best="critic",
        critic_on_last_attempt=True,
    )
    step = built["pipe"]("Draw a cat").trace.steps[0]
    assert step.accepted_image == "step01_attempt0.png" and step.selected is not None
    assert step.selected.attempt == 0 and step.attempts[0].forced and not step.attempts[2].accepted


def test_an_unusable_ranking_keeps_the_last_attempt_with_the_error() -> None:
    garbage = "I like the second one."
    built = build(
        [verdict(False, "b"), verdict(False, "c"), garbage, garbage, garbage, verdict(True)],
        select_best="critic",
    )
    result = built["pipe"]("Draw a cat")
    step = result.trace.steps[0]
    assert result.ok and step.accepted_image == "step01_attempt2.png"
    assert (
        step.selected is not None
        and step.selected.attempt == 2
        and step.selected.raw_replies == [garbage] * 3
    )
    assert step.selected.error is not None and "no JSON object" in step.selected.error


def test_an_accepted_step_asks_for_no_ranking() -> None:
    built = build([verdict(True), verdict(True)], select_best="critic")
    trace = built["pipe"]("Draw a cat").trace
    assert len(built["critic"].calls) == 2 and all(s.selected is None for s in trace.steps)


def test_judge_keeps_the_attempt_with_the_best_sc_and_pq() -> None:
    # SC then PQ per attempt: overall sqrt(SC*PQ) = 5, 8.49, 7.35 for step 1; step 2 is accepted
    judge = ["5", "5", "9", "8", "6", "9", "7", "7"]
    built = build([verdict(False, "b"), verdict(False, "c"), verdict(True)], judge=judge, select_best="judge")
    result = built["pipe"]("Draw a cat")
    step = result.trace.steps[0]
    assert step.accepted_image == "step01_attempt1.png"
    assert step.selected is not None and (step.selected.attempt, step.selected.by) == (1, "judge")
    assert step.selected.reason.startswith("best judge score sqrt(SC*PQ) = 8.49 (SC 9, PQ 8) of 3 scored")
    assert len(built["critic"].calls) == 3  # no ranking call
    assert len(built["judge"].calls) == 8


def test_judge_setting_without_a_judge_is_refused_at_load() -> None:
    data = {"planner": "scripted:p", "critic": "scripted:c", "generator": "scripted:g"}
    with pytest.raises(ConfigError, match=r"loop\.select_best 'judge' needs a judge.*'judge'") as error:
        PipelineConfig.from_dict({**data, "loop": {"select_best": "judge"}})
    assert "\n" not in str(error.value)
    assert PipelineConfig.from_dict({**data, "judge": "scripted:j", "loop": {"select_best": "judge"}}).judge


def test_the_ranking_reply_is_read_within_bounds() -> None:
    assert parse_ranking(format_ranking([3, 1], "x" * 5000), 3).reason == "x" * 1000
    for bad in ("[0]", "[4]", "[1, 1]", "[True]", "'2'", "[]", "[1, 2, 3, 1]"):
        with pytest.raises(ParseError):
            parse_ranking("<answer>{'ranking': " + bad + ", 'reason': 'r'}</answer>", 3)


def test_a_round_with_several_accepted_candidates_keeps_the_one_ranked_first(tmp_path: Path) -> None:
    """With loop.candidates the critic may accept more than one attempt of a round: the ranking compares
    those (not the rejected ones), and its first is kept instead of the first in seed order."""
    ranking = format_ranking([2, 1], "the second is calmer")
    critic = [accepting("a cat", 100, 101)] * 3 + [ranking] + [accepting("orange cat", 200)] * 3
    built = build(critic, select_best="critic", candidates=3, critic_on_last_attempt=True)
    result = built["pipe"]("Draw a cat", out_dir=tmp_path)
    assert result.ok and result.trace.steps[1].selected is None  # one accepted: nothing to compare
    step = result.trace.steps[0]
    assert [(a.attempt, a.accepted, a.forced) for a in step.attempts] == [
        (0, False, False),
        (1, True, False),  # kept with the critic's approval: not forced
        (2, False, False),
    ]
    assert step.accepted_image == "step01_attempt1.png"
    assert step.selected is not None and step.selected.attempt == 1
    assert step.selected.reason == "ranked first of 2 accepted (ranking [2, 1]): the second is calmer"
    images = ScriptedVLMBackend.images_in(built["critic"].calls[3])  # before + the two accepted attempts
    assert [im.tobytes() for im in images[1:]] == [
        result.images[f"step01_attempt{n}.png"].tobytes() for n in (0, 1)
    ]
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    ranked = page.split('data-it="ranking-1"', 1)[1].split("</ol>", 1)[0]
    assert [p.split('"', 1)[0] for p in ranked.split('src="images/')[1:]] == [
        "step01_attempt1.png",
        "step01_attempt0.png",
    ]


def test_an_unusable_ranking_of_accepted_candidates_keeps_the_first_accepted(tmp_path: Path) -> None:
    critic = [verdict(True), verdict(True), *["no ranking"] * 3, *[accepting("orange cat", 200)] * 2]
    built = build(critic, select_best="critic", candidates=3)
    result = built["pipe"]("Draw a cat", out_dir=tmp_path)
    step = result.trace.steps[0]
    assert result.ok and len(built["critic"].calls) == len(critic)
    assert step.accepted_image == "step01_attempt0.png" and step.selected is not None
    assert step.selected.error is not None and not step.attempts[0].forced
    assert step.selected.reason == "no usable ranking: the first accepted attempt is kept"
    page = (tmp_path / "index.html").read_text(encoding="utf-8")  # kept by seed order, not by a ranking
    assert "ranked lower" not in page and "seed 101 · not kept (an earlier candidate was)" in page
