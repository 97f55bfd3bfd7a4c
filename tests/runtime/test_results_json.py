"""``batch``'s ``results.json`` joins the step texts as the release and ``eval generate`` do: no separator."""

from __future__ import annotations

from interleave_thinker.core.types import Plan, PlanStep, Request, StepRecord, Trace
from interleave_thinker.runtime.reports import answer_rows, release_text_answer


def _trace() -> Trace:
    steps = [
        PlanStep(step_number=1, instruction="Fold.", prompt="a fold", auxiliary_text="Fold it in half."),
        PlanStep(step_number=2, instruction="Crease.", prompt="a crease", auxiliary_text="None"),
        PlanStep(step_number=3, instruction="Open.", prompt="open", auxiliary_text=None),
    ]
    trace = Trace(request=Request(text="make a crane", task="origami"))
    trace.planner.plan = Plan(steps=steps)
    texts = ["Fold it in half.", "Crease.", "Open."]
    trace.steps = [
        StepRecord(step=s, kind="image", text=t, accepted_image=f"step{s.step_number}.png")
        for s, t in zip(steps, texts, strict=True)
    ]
    trace.status = "succeeded"
    return trace


def test_results_json_joins_step_texts_without_a_separator() -> None:
    trace = _trace()
    [row] = answer_rows({"r1": trace})
    assert row["text_answer"] == "Fold it in half.Crease.Open."
    assert row["text_answer"] == release_text_answer(trace)  # what `eval generate` submits
    assert row["image_answer"] == [f"requests/r1/images/step{n}.png" for n in (1, 2, 3)]
    assert (row["id"], row["prompt"], row["task"]) == ("r1", "make a crane", "origami")


def test_a_request_without_a_plan_has_an_empty_text_answer() -> None:
    trace = Trace(request=Request(text="q"), status="failed", error="planner failed")
    assert answer_rows({"r2": trace})[0]["text_answer"] == ""
