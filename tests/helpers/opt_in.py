"""One request that uses every opt-in loop feature and succeeds at each (tests of how they are shown)."""

from __future__ import annotations

from interleave_thinker.agents.planner import format_plan
from interleave_thinker.agents.ranking import format_ranking
from interleave_thinker.agents.sequence_review import format_review
from interleave_thinker.core.types import Flag, Plan, PlanStep
from tests.helpers.replies import verdict

PLAN = format_plan(
    Plan(
        steps=[
            PlanStep(step_number=1, step_name="S1", instruction="Draw a fox.", prompt="a red fox"),
            PlanStep(step_number=2, step_name="S2", instruction="It sleeps.", prompt="the fox sleeps"),
        ],
        reasoning="plan",
    )
)
LOOP = {"candidates": 3, "select_best": "critic", "repair_budget": 2, "max_attempts": 3}
REASON = "the fox turned grey"
# Step 1: two rejections and a forced third, so the ranking keeps the second; step 2: the first two
# accepted, the first kept; then the review flags step 2 and its first repair call is accepted.
SUCCESS = [
    verdict(False, "a redder fox"),
    verdict(False, "a redder fox"),
    format_ranking([2, 1, 3], "the second is sharpest"),
    verdict(True),
    verdict(True),
    format_review([Flag(step=2, reason=REASON)]),
    verdict(True),
]
