"""The critic reward reproduced value by value on a table of cases, with scripted generator and judge."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.core.errors import BackendError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from interleave_thinker.train.rewards import (
    CriticReward,
    StepwiseScorer,
    critic_accuracy_reward,
    critic_format_reward,
    normalize_response,
    planner_format_reward,
    planner_plan_reward,
)

SC_OK = '{"score": [7, 9], "reasoning": "sc"}'  # SC = 7
PQ_OK = '{"score": [8, 6], "reasoning": "pq"}'  # PQ = 6
PERFECT = '{"score": [10, 10]}'  # SC = PQ = 10
PREVIOUS = "a cat"


def answer(success: Any, refine: Any = "better cat") -> str:
    return f"<think>look</think><answer>{{'previous_step_success': {success!r}, 'refine_prompt': {refine!r}}}</answer>"


@dataclass
class Case:
    name: str
    response: str
    success: bool
    expected: tuple[float, float, float, float, float]  # format, accuracy, semantic, quality, overall
    generated: str | None = None  # prompt sent to the generator, None = no call
    judge: tuple[str, str] = (SC_OK, PQ_OK)
    generator: str = "ok"  # ok | fail | slow
    before: str = "white"  # white | photo
    truth: tuple[float, float] = (5.0, 8.0)


def regenerated(name: str, expected: tuple[float, float, float, float, float], **changes: Any) -> Case:
    """A failed step the critic rightly calls failed, regenerated with the refine prompt "better cat"."""
    return Case(name, answer(False), False, expected, "better cat", **changes)


CASES = [
    regenerated("valid, accurate, regenerated", (1, 1, 0.6, 0.4, 0.82)),
    Case(
        "whitespace around tags",
        "< think > look < /think >\n< answer > {'previous_step_success': False, 'refine_prompt': 'better cat'} < / answer >",
        False,
        (1, 1, 0.6, 0.4, 0.82),
        "better cat",
    ),
    Case(
        "normalisation reaches the refine prompt",
        answer(False, "a cat / dog <b>"),
        False,
        (1, 1, 0.6, 0.4, 0.82),
        "a cat/dog<b>",
    ),
    Case(
        "no think tag still passes",
        "<answer>{'previous_step_success': False, 'refine_prompt': 'better cat'}</answer>",
        False,
        (1, 1, 0.6, 0.4, 0.82),
        "better cat",
    ),
    Case(
        "think after answer fails format",
        "<answer>{'previous_step_success': False, 'refine_prompt': 'x'}</answer><think>late</think>",
        False,
        (0, 1, 0.6, 0.4, 0.32),
        "x",
    ),
    Case("success as a string", answer("False", "x"), False, (0, 0, 0.6, 0.4, 0.22), "x"),
    # the release compares with ==, and 0 == False: accuracy 1 (format 0: not a bool)
    Case("success as an int", answer(0, "x"), False, (0, 1, 0.6, 0.4, 0.32), "x"),
    Case("refine prompt of wrong type", answer(False, None), False, (0, 1, 0.6, 0.4, 0.32), PREVIOUS),
    Case("no answer at all", "I think it failed.", False, (0, 0, 0.6, 0.4, 0.22), PREVIOUS),
    Case(
        "truncated answer",
        "<think>a</think><answer>{'previous_step_success': False, 'refine_prompt': 'x'",
        False,
        (0, 0, 0.6, 0.4, 0.22),
        PREVIOUS,
    ),
    Case(
        "JSON literals",
        '<answer>{"previous_step_success": false, "refine_prompt": "x"}</answer>',
        False,
        (1, 1, 0.6, 0.4, 0.82),
        "x",
    ),
    Case(
        "trailing comma",
        "<answer>{'previous_step_success': False, 'refine_prompt': 'x',}</answer>",
        False,
        (1, 1, 0.6, 0.4, 0.82),
        "x",
    ),
    Case("mismatch on failed step", answer(True, ""), False, (1, 0, 0.6, 0.4, 0.72), PREVIOUS),
    Case(
        "refine prompt empty -> previous prompt", answer(False, ""), False, (1, 1, 0.6, 0.4, 0.82), PREVIOUS
    ),
    Case("gt success skips generation", answer(True, ""), True, (1, 1, 0.5, 0.5, 0.8)),
    Case("gt success, wrong prediction", answer(False), True, (1, 0, 0.5, 0.5, 0.7)),
    Case("gt success, garbage response", "garbage", True, (0, 0, 0.5, 0.5, 0.2)),
    regenerated("judge failure", (1, 1, 0.5, 0.5, 0.8), judge=("not json", PQ_OK)),
    regenerated("generator failure", (1, 1, 0.5, 0.5, 0.8), generator="fail"),
    regenerated("deadline exceeded", (1, 1, 0.5, 0.5, 0.8), generator="slow"),
    regenerated("perfect regeneration", (1, 1, 1.0, 1.0, 1.0), judge=(PERFECT, "[10, 10]"), truth=(0, 0)),
    regenerated("worse regeneration", (1, 1, 0.25, 0.1, 0.685), judge=("[2, 4]", "[0, 9]"), truth=(7, 8)),
    regenerated("edit from a real before image", (1, 1, 0.6, 0.4, 0.82), before="photo"),
]


class Generator(ScriptedImageBackend):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def generate(self, request: ImageRequest) -> Image.Image:
        if self.mode == "fail":
            self.calls.append(None)  # type: ignore[arg-type]
            raise BackendError("generator down")
        image = super().generate(request)
        if self.mode == "slow":
            time.sleep(0.5)
        return image


def befores(tmp_path: Path) -> dict[str, Path]:
    white, photo = tmp_path / "white.png", tmp_path / "photo.png"
    Image.new("RGB", (64, 48), "white").save(white)
    Image.new("RGB", (64, 48), (30, 90, 150)).save(photo)
    return {"white": white, "photo": photo}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_critic_reward_table(case: Case, tmp_path: Path) -> None:
    sc, pq = case.judge
    judge_backend = ScriptedVLMBackend(
        [lambda m: sc if len(ScriptedVLMBackend.images_in(m)) == 2 else pq], repeat_last=True
    )
    generator = Generator(case.generator)
    scorer = StepwiseScorer(
        generator, Judge(judge_backend, builtin_templates(), retry=RetryPolicy(max_attempts=2)), deadline=0.25
    )
    reward = CriticReward(scorer)
    paths = befores(tmp_path)
    columns = {
        "ground_truth": [{"success": case.success, "semantics": case.truth[0], "quality": case.truth[1]}],
        "origin_prompt": ["a sitting cat"],
        "origin_image_path": [str(paths[case.before])],
        "previous_prompt": [PREVIOUS],
    }
    [overall] = reward(None, [case.response], **columns)
    parts = reward.last_components[0]
    assert (parts["format"], parts["accuracy"]) == (case.expected[0], case.expected[1])
    assert parts["semantic"] == pytest.approx(case.expected[2])
    assert parts["quality"] == pytest.approx(case.expected[3])
    assert overall == pytest.approx(case.expected[4])
    assert critic_format_reward(None, [case.response]) == [case.expected[0]]
    assert critic_accuracy_reward(None, [case.response], ground_truth=columns["ground_truth"]) == [
        case.expected[1]
    ]
    if case.generated is None:
        assert generator.calls == [] and judge_backend.calls == []
        return
    if case.generator == "fail":
        assert generator.calls == [None] and "generator down" in parts["error"]
        return
    call = generator.calls[0]
    assert (call.prompt, call.seed, call.width, call.height) == (case.generated, 0, 64, 48)
    if case.before == "white":
        assert call.image is None  # white canvas -> text-to-image
    else:
        assert call.image is not None and call.image.getpixel((0, 0)) == (30, 90, 150)
    if case.generator == "slow":
        assert "deadline" in parts["error"]
    if case.judge[0] == "not json":
        assert "SC judgement unparsable" in parts["error"]


def test_normalize_response() -> None:
    assert normalize_response("< answer > a / b </ answer >") == "<answer>a/b</answer>"


def test_batch_shares_identical_generations(tmp_path: Path) -> None:
    paths = befores(tmp_path)
    judge_backend = ScriptedVLMBackend(
        [lambda m: SC_OK if len(ScriptedVLMBackend.images_in(m)) == 2 else PQ_OK], repeat_last=True
    )
    generator = ScriptedImageBackend()
    scorer = StepwiseScorer(generator, Judge(judge_backend, builtin_templates()), deadline=10)
    reward = CriticReward(scorer)
    completions = [answer(False, "same"), answer(False, "same"), answer(False, "other"), answer(True, "")] * 2
    n = len(completions)
    rewards = reward(
        None,
        completions,
        ground_truth=[{"success": False, "semantics": 5, "quality": 8}] * n,
        origin_prompt=["cat"] * n,
        origin_image_path=[str(paths["white"])] * n,
        previous_prompt=["same"] * n,  # the success=True rollout regenerates from 'same' too
    )
    assert sorted(c.prompt for c in generator.calls) == ["other", "same"]
    assert scorer.cache.misses == 2 and scorer.cache.hits == n - 2
    assert len(judge_backend.calls) == 4  # one SC + one PQ per distinct generation
    assert rewards == pytest.approx([0.82, 0.82, 0.82, 0.72] * 2)


def test_disk_cache_is_reused_across_scorers(tmp_path: Path) -> None:
    from interleave_thinker.train.rewards.cache import GenerationCache

    paths = befores(tmp_path)
    kwargs = {
        "ground_truth": [{"success": False, "semantics": 5, "quality": 8}],
        "origin_prompt": ["cat"],
        "origin_image_path": [str(paths["photo"])],
        "previous_prompt": ["x"],
    }
    for expected_calls in (1, 0):
        generator = ScriptedImageBackend()
        judge = Judge(ScriptedVLMBackend([SC_OK, PQ_OK]), builtin_templates())
        CriticReward(StepwiseScorer(generator, judge, cache=GenerationCache(tmp_path / "cache")))(
            None, [answer(False)], **kwargs
        )
        assert len(generator.calls) == expected_calls


PLAN = "<think>t</think><answer>{'execution_plan': [{'step_number': 1, 'instruction': 'Sketch.', 'prompt': 'a cat sketch', 'auxiliary_text': None}, {'step_number': 2, 'instruction': 'Colour.', 'prompt': 'colour it', 'auxiliary_text': None}]}</answer>"


def test_planner_rewards() -> None:
    assert planner_format_reward(
        None, [PLAN, PLAN.replace("<think>t</think>", ""), "<think>t</think><answer>nope</answer>"]
    ) == [1.0, 0.0, 0.0]
    requests = ["Draw a cat in 2 steps", "Draw a cat in three steps", "Draw a cat"]
    assert planner_plan_reward(requests, [PLAN] * 3) == [1.0, 0.75, 1.0]
    prefixed = PLAN.replace("'a cat sketch'", "'Step 1: a cat sketch'").replace(
        "'auxiliary_text': None}]", "'auxiliary_text': 'Some text'}]"
    )
    assert planner_plan_reward(["Draw a cat"], [prefixed]) == [0.5]
    assert planner_plan_reward(["Draw a cat and explain each step"], [prefixed]) == [0.75]
    conversational = [[{"role": "user", "content": [{"type": "text", "text": "Draw a cat in 2 steps"}]}]]
    assert planner_plan_reward(conversational, [[{"role": "assistant", "content": PLAN}]]) == [1.0]


class OtherSize(ScriptedImageBackend):
    """A generator that ignores the requested size (as real ones do: multiples of 16, fixed outputs)."""

    def generate(self, request: ImageRequest) -> Image.Image:
        super().generate(request)
        return Image.linear_gradient("L").convert("RGB").resize((40, 30))


def test_pq_and_sc_judge_the_regeneration_resized_to_the_before_image(tmp_path: Path) -> None:
    """As released: both judgements see the "after" image resized (bicubic) to the "before" size; a PQ on
    the raw 40x30 regeneration would score 1 here, not 6."""
    paths = befores(tmp_path)  # 64x48
    seen: list[Image.Image] = []

    def reply(messages: list[Any]) -> str:
        images = ScriptedVLMBackend.images_in(messages)
        seen.append(images[-1])
        right = all(image.size == (64, 48) for image in images)
        if len(images) == 2:
            return SC_OK if right else '{"score": [1, 1]}'
        return PQ_OK if right else '{"score": [1, 1]}'

    judge_backend = ScriptedVLMBackend([reply], repeat_last=True)
    reward = CriticReward(StepwiseScorer(OtherSize(), Judge(judge_backend, builtin_templates()), deadline=10))
    [overall] = reward(
        None,
        [answer(False)],
        ground_truth=[{"success": False, "semantics": 5, "quality": 8}],
        origin_prompt=["a sitting cat"],
        origin_image_path=[str(paths["photo"])],
        previous_prompt=[PREVIOUS],
    )
    parts = reward.last_components[0]
    assert (parts["semantic"], parts["quality"]) == (pytest.approx(0.6), pytest.approx(0.4))
    assert overall == pytest.approx(0.82)
    expected = (
        Image.linear_gradient("L").convert("RGB").resize((40, 30)).resize((64, 48), Image.Resampling.BICUBIC)
    )
    assert len(seen) == 2 and all(image.tobytes() == expected.tobytes() for image in seen)


@pytest.mark.parametrize("instruction", ["", "   \n\t"])
def test_an_empty_instruction_is_a_judge_error_without_a_call(instruction: str, tmp_path: Path) -> None:
    paths = befores(tmp_path)
    judge_backend = ScriptedVLMBackend([SC_OK, PQ_OK])
    judge = Judge(judge_backend, builtin_templates())
    result = judge.judge(Image.new("RGB", (64, 48)), Image.new("RGB", (32, 32)), instruction)
    assert not result.ok and result.error is not None and "empty instruction" in result.error
    assert judge_backend.calls == []
    reward = CriticReward(StepwiseScorer(ScriptedImageBackend(), judge, deadline=10))
    reward(
        None,
        [answer(False)],
        ground_truth=[{"success": False, "semantics": 5, "quality": 8}],
        origin_prompt=[instruction],
        origin_image_path=[str(paths["photo"])],
        previous_prompt=[PREVIOUS],
    )
    parts = reward.last_components[0]
    assert (parts["semantic"], parts["quality"]) == (0.5, 0.5) and "empty instruction" in parts["error"]


def test_the_instruction_is_stripped_before_it_is_filled_in() -> None:
    judge_backend = ScriptedVLMBackend([SC_OK, PQ_OK])
    Judge(judge_backend, builtin_templates()).judge(
        Image.new("RGB", (64, 48)), Image.new("RGB", (32, 32)), "  a sitting cat \n"
    )
    text = ScriptedVLMBackend.text_in(judge_backend.calls[0])
    assert "a sitting cat" in text and "  a sitting cat" not in text and "a sitting cat \n" not in text


def test_grpo_logs_stepwise_failures_apart_from_skips(tmp_path: Path) -> None:
    """Both score 0.5/0.5; the logged counts tell a skipped part (ground truth success) from a failed one."""

    class DownFor(ScriptedImageBackend):
        def generate(self, request: ImageRequest) -> Image.Image:
            if request.prompt == "down":
                raise BackendError("generator down")
            return super().generate(request)

    paths = befores(tmp_path)
    judge = Judge(
        ScriptedVLMBackend(
            [lambda m: SC_OK if len(ScriptedVLMBackend.images_in(m)) == 2 else PQ_OK], repeat_last=True
        ),
        builtin_templates(),
    )
    reward = CriticReward(StepwiseScorer(DownFor(), judge, deadline=10))
    logged: list[tuple[str, float]] = []
    truths = [True, False, False, False]
    reward(
        None,
        [answer(True, ""), answer(False, "fine"), answer(False, "down"), answer(False, "down")],
        ground_truth=[{"success": s, "semantics": 5, "quality": 8} for s in truths],
        origin_prompt=["cat"] * 4,
        origin_image_path=[str(paths["white"])] * 4,
        previous_prompt=["cat"] * 4,
        log_metric=lambda name, value: logged.append((name, value)),
    )
    parts = reward.last_components
    assert [(p["semantic"], p["quality"]) for p in (parts[0], parts[2])] == [(0.5, 0.5), (0.5, 0.5)]
    assert sorted(logged) == [("stepwise/failed", 2.0), ("stepwise/scored", 1.0), ("stepwise/skipped", 1.0)]
    assert reward.last_counts == {"scored": 1, "skipped": 1, "failed": 2}
