from __future__ import annotations

import math

import pytest
from PIL import Image

from interleave_thinker.agents.judge import Judge, parse_judgement
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.prompt_store import TemplateStore, builtin_templates
from interleave_thinker.testing.scripted import ScriptedVLMBackend

GOOD = [
    ('||V^=^V||\n{\n"score" : [7, 9],\n"reasoning" : "good"\n}\n||V^=^V||', [7.0, 9.0], "good"),
    ('{"score": [7, 9], "reasoning": "fine"}', [7.0, 9.0], "fine"),
    ("{'score': [3, 10], 'reasoning': 'meh'}", [3.0, 10.0], "meh"),
    ('Here you go:\n```json\n{"score": [5, 6], "reasoning": "ok"}\n```', [5.0, 6.0], "ok"),
    ("[8, 2]", [8.0, 2.0], None),
    ("[8.5, 9.0]", [8.5, 9.0], None),
    ("7", [7.0], None),
    ("  10 ", [10.0], None),
    ('{"score": 6, "reasoning": "single"}', [6.0], "single"),
    ('{"score": ["4", "5"], "reasoning": "strings"}', [4.0, 5.0], "strings"),
    ('||V^=^V|| {"score": [1, 2], "reasoning": "unterminated"', [1.0, 2.0], "unterminated"),
    ('{"score": [0, 0], "reasoning": "zero is a real score"}', [0.0, 0.0], "zero is a real score"),
]

BAD = [
    ("", "no JSON"),
    ("The image is lovely.", "no JSON"),
    ('{"reasoning": "forgot the score"}', "no 'score'"),
    ('{"score": [], "reasoning": "empty"}', "non-empty list"),
    ('{"score": ["high", 3]}', "not a number"),
    ('{"score": [11, 3]}', "outside 0-10"),
    ('{"score": [-1, 3]}', "outside 0-10"),
    ('{"score": true}', "bool"),
    ("42", "outside 0-10"),
]


@pytest.mark.parametrize(("reply", "scores", "reasoning"), GOOD)
def test_judgement_parses(reply: str, scores: list[float], reasoning: str | None) -> None:
    assert parse_judgement(reply) == (scores, reasoning)


@pytest.mark.parametrize(("reply", "problem"), BAD)
def test_judgement_errors_never_guess(reply: str, problem: str) -> None:
    with pytest.raises(ParseError, match=problem) as info:
        parse_judgement(reply)
    assert info.value.raw == reply


def test_judge_scores_and_messages(prompts_dir: object) -> None:
    templates = TemplateStore(folder=prompts_dir, download=False).load()  # type: ignore[arg-type]
    backend = ScriptedVLMBackend(
        ['{"score": [6, 9], "reasoning": "a"}', '{"score": [8, 4], "reasoning": "b"}']
    )
    before, after = Image.new("RGB", (64, 48), "white"), Image.new("RGB", (32, 32), "red")
    judgement = Judge(backend, templates).judge(before, after, "draw a red cat")
    assert (judgement.sc, judgement.pq) == (6.0, 4.0)
    assert judgement.overall == pytest.approx(math.sqrt(24))
    sc_call, pq_call = backend.calls
    sc_images = ScriptedVLMBackend.images_in(sc_call)
    assert [im.size for im in sc_images] == [(64, 48), (64, 48)]  # after resized to before's size
    text = ScriptedVLMBackend.text_in(sc_call)
    expected = "\n".join(templates.get(n) for n in ("judge_context", "judge_edit_rule", "judge_edit_sc"))
    assert text == expected.replace("<instruction>", "draw a red cat")
    assert [p["type"] for p in sc_call[0]["content"]] == ["image", "image", "text"]
    # PQ judges the same resized image as SC, as the release's judge does
    assert ScriptedVLMBackend.images_in(pq_call) == [after.resize((64, 48), Image.Resampling.BICUBIC)]
    assert ScriptedVLMBackend.text_in(pq_call) == templates.get("judge_context") + "\n" + templates.get(
        "judge_pq"
    )


def test_judge_unparsable_is_an_error_not_a_number() -> None:
    backend = ScriptedVLMBackend(["nope"], repeat_last=True)
    judgement = Judge(backend, builtin_templates(), retry=RetryPolicy(max_attempts=2)).judge(
        Image.new("RGB", (8, 8)), Image.new("RGB", (8, 8)), "x"
    )
    assert not judgement.ok and judgement.sc is None and judgement.pq is None and judgement.overall is None
    assert "SC judgement unparsable after 2 replies" in (judgement.error or "")
    assert len(backend.calls) == 4 and judgement.raw_replies == {
        "sc": ["nope", "nope"],
        "pq": ["nope", "nope"],
    }
