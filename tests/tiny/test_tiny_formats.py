"""Format-constrained decoding of the tiny stand-ins (``tiny/formats.py``): a request of a registered shape
(``agents/reply_formats.py``) gets a reply its parser reads, the values picked by the real tiny model.

Real tiny models (the shipped critic and judge), real requests built by the agents and the scorers; one
load of each model for the module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.ranking import Ranker
from interleave_thinker.agents.reply_formats import Choice
from interleave_thinker.agents.sequence_review import SequenceReviewer, ShownStep
from interleave_thinker.backends.specs import load_vlm_backend
from interleave_thinker.core.prompt_store import TemplateStore
from interleave_thinker.eval import benchmarks
from interleave_thinker.eval.benchmarks.consistency import protocol as consistency
from interleave_thinker.eval.benchmarks.consistency import scorer as score_consistency
from interleave_thinker.eval.benchmarks.wise import scorer as score_wise
from interleave_thinker.eval.judging import ChatTransport, JudgeImage, JudgeRequest
from interleave_thinker.tiny.formats import SkeletonAutomaton, constraint
from tests.conftest import shared_path

pytestmark = pytest.mark.slow

WHITE = Image.new("RGB", (64, 64), "white")
DARK = Image.new("RGB", (64, 64), (30, 30, 30))


@pytest.fixture(scope="module")
def critic() -> Any:
    return load_vlm_backend("tiny:critic-sft", role="critic")


@pytest.fixture(scope="module")
def judge() -> Any:
    return load_vlm_backend("tiny:judge", role="judge")


def _png(image: Image.Image) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_automaton_forces_the_text_and_allows_only_the_values(critic: Any) -> None:
    tokenizer = critic.processor.tokenizer
    end = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    automaton = SkeletonAutomaton(tokenizer, ("{'n': ", Choice(("1", "10", "7")), "}"), end)
    fixed = tokenizer.encode("{'n': ", add_special_tokens=False)
    assert automaton.allowed([]) == [fixed[0]]
    values = automaton.allowed(fixed)
    assert sorted(values) == sorted(
        {tokenizer.encode(v, add_special_tokens=False)[0] for v in ("1", "10", "7")}
    )
    whole = (
        fixed
        + tokenizer.encode("7", add_special_tokens=False)
        + tokenizer.encode("}", add_special_tokens=False)
    )
    assert automaton.allowed(whole) == end
    assert automaton.allowed([*fixed, end[0]]) == end  # off the skeleton: only the end is left


def test_the_tiny_critic_ranks_and_reviews_in_their_formats(critic: Any) -> None:
    templates = TemplateStore().load()
    ranked = Ranker(critic, templates, max_new_tokens=64).rank(
        before=WHITE, attempts=[WHITE, DARK, WHITE], instruction="draw a cat"
    )
    assert ranked.errors == [] and ranked.ranking is not None, ranked.raw_replies
    assert sorted(ranked.ranking.order) == [1, 2, 3]  # a whole order of the three attempts
    shown = [ShownStep(2, "a cat", WHITE), ShownStep(5, "the cat asleep", DARK)]
    reviewed = SequenceReviewer(critic, templates, max_new_tokens=64).review(shown)
    assert reviewed.errors == [] and reviewed.flags is not None, reviewed.raw_replies
    assert [flag.step in (2, 5) for flag in reviewed.flags] == [True]
    # In a batch, the ranking keeps its format beside a request of no registered shape.
    from interleave_thinker.agents.ranking import parse_ranking, ranking_messages

    plain = [{"role": "user", "content": "draw a cat"}]
    replies = critic.chat_batch([ranking_messages(WHITE, [WHITE, DARK], "a cat"), plain], max_new_tokens=32)
    assert sorted(parse_ranking(replies[0], 2).order) == [1, 2], replies
    # A request of no registered shape (the critic's own verdict) is answered freely, as before.
    assert constraint(critic.processor.tokenizer, [0], [{"role": "user", "content": "draw a cat"}], 3) == {}


def test_the_tiny_judge_answers_the_rewards_text_first_judgements_in_its_budget(judge: Any) -> None:
    agent = Judge(judge, TemplateStore().load(), max_new_tokens=16)  # the tiny GRPO config's budget
    agent.text_first = True
    result = agent.judge(WHITE, DARK, "draw a cat")
    assert result.ok, (result.error, result.raw_replies)
    assert len(result.sc_scores) == len(result.pq_scores) == 2


def test_the_tiny_judge_scores_a_consistency_pair(judge: Any) -> None:
    prompts = consistency.prompts()
    text = "Request: a cat. Step 1: a cat. Step 2: the cat asleep."
    request = JudgeRequest.one_turn(
        (text, JudgeImage(_png(WHITE), "image/png"), JudgeImage(_png(DARK), "image/png")),
        score_consistency.SETTINGS,
        system=prompts.texts[score_consistency.SYSTEM],
    )
    reply = ChatTransport(judge, "tiny:judge").send(request)
    scores = score_consistency.parse_pair(reply)
    assert all(0 <= scores[key] <= 10 for key in score_consistency.CRITERIA), reply


def test_the_tiny_judge_answers_wise_verified(judge: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))
    protocol = score_wise.VERIFIED
    prompts = benchmarks.get("wise").protocols[0].prompts()
    raw = json.loads(
        Path(shared_path("benchmarks", "wise", "natural_science_verified.json")).read_text("utf-8")
    )[0]
    request = score_wise.build_request(protocol, prompts, raw, _png(WHITE))
    reply = ChatTransport(judge, "tiny:judge").send(request)
    assert score_wise.parse_verified(reply) in (0.0, 1.0), reply


@pytest.mark.parametrize("benchmark", ["rise", "ueval"])
def test_the_tiny_judge_answers_rise_and_ueval_in_the_format_their_scorer_registers(
    judge: Any, benchmark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interleave_thinker.eval.benchmarks.rise import protocol as rise
    from interleave_thinker.eval.benchmarks.rise import scorer as score_rise
    from interleave_thinker.eval.benchmarks.ueval import protocol as ueval
    from interleave_thinker.eval.benchmarks.ueval import scorer as score_ueval
    from interleave_thinker.eval.judge_formats import register_prompt_format

    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))
    prompts = benchmarks.get(benchmark).protocols[0].prompts()
    module, first, parse = {
        "rise": (rise, "rise_prompt_generation", score_rise.parse_judge),
        "ueval": (ueval, "ueval_text_template", score_ueval.parse_rubric),
    }[benchmark]
    register_prompt_format(benchmark, prompts, module.REPLY)  # as the benchmark's scorer does when made
    request = JudgeRequest.one_turn((prompts.texts[first], JudgeImage(_png(WHITE), "image/png")))
    reply = ChatTransport(judge, "tiny:judge").send(request)
    assert parse(reply), reply


def test_eval_score_consistency_offline_with_the_tiny_preset_alone(tmp_path: Path) -> None:
    """Issue 45: `eval score consistency --preset tiny` (no --judge) scores offline with the stand-in
    tiny:judge, and says it is one; without the tiny preset, --judge is required and the message says how."""
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app
    from interleave_thinker.core.errors import ConfigError
    from interleave_thinker.eval.scoring import STAND_IN
    from tests.helpers.runs import make_batch

    runs = make_batch(tmp_path / "batch")
    (runs / "batch.json").write_text(json.dumps({"ids": ["req0", "req1"], "input": "in.jsonl"}))
    args = ["eval", "score", "consistency", "--outputs", str(runs), "--quiet"]
    result = CliRunner().invoke(app, [*args, "--preset", "tiny"])
    assert result.exit_code == 0, (result.output, result.exception)
    summary = json.loads((runs / "scores-consistency" / "summary.json").read_text())
    assert summary["judge"]["spec"] == "tiny:judge" and summary["judge"]["note"] == STAND_IN
    assert summary["counts"]["scored"] == 2 and summary["overall"]["score"] is not None
    refused = CliRunner().invoke(app, args)
    assert isinstance(refused.exception, ConfigError)
    assert "--judge is required" in str(refused.exception) and "--preset tiny" in str(refused.exception)
