"""`train grpo`'s last lines say how many step-wise rewards fell back to 0.5 (issue 47), from the logged
``stepwise/<status>`` counts alone (no training here: the logging itself is tested in tests/train)."""

from __future__ import annotations

from interleave_thinker.cli.train_grpo import stepwise_line


def test_a_run_whose_judge_never_answered_says_so() -> None:
    logged = [{"loss": 0.1}, *[{"stepwise/scored": 0.0, "stepwise/skipped": 0.0, "stepwise/failed": 4.0}] * 4]
    assert stepwise_line(logged) == (
        "step-wise reward: 0 of 4 samples scored per call, 4 fell back to 0.5 (4 of 4 logged steps with "
        "failures; the judge or generator did not answer usably)"
    )


def test_some_failures_are_averaged_over_the_logged_steps() -> None:
    logged = [
        {"stepwise/scored": 3.0, "stepwise/skipped": 1.0, "stepwise/failed": 0.0},
        {"stepwise/scored": 2.0, "stepwise/skipped": 1.0, "stepwise/failed": 1.0},
    ]
    line = stepwise_line(logged)
    assert line is not None and line.startswith(
        "step-wise reward: 2.5 of 4 samples scored per call, 0.5 fell back"
    )
    assert "(1 of 2 logged steps with failures" in line


def test_nothing_is_said_when_nothing_fell_back_or_nothing_was_logged() -> None:
    assert stepwise_line([{"stepwise/scored": 4.0, "stepwise/skipped": 0.0, "stepwise/failed": 0.0}]) is None
    assert stepwise_line([{"loss": 0.1, "reward": 0.5}]) is None
