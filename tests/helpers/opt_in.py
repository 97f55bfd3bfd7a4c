"""One request that uses every opt-in loop feature and succeeds at each (tests of how they are shown)."""

from __future__ import annotations

from interleave_thinker.agents.ranking import format_ranking
from interleave_thinker.agents.sequence_review import format_review
from interleave_thinker.core.types import Flag
from interleave_thinker.testing.scripted import Reply
from tests.helpers.replies import accepting, plan_reply, verdict

PLAN = plan_reply(("Draw a fox.", "a red fox", None), ("It sleeps.", "the fox sleeps", None))
LOOP = {"candidates": 3, "select_best": "critic", "repair_budget": 2, "max_attempts": 3}
REASON = "the fox turned grey"
# Step 1: two rejections and a forced third, so the ranking keeps the second; step 2: the first accepted
# and kept, the second rejected (two accepted would be ranked too); then the review flags step 2 and its
# first repair call is accepted.
SUCCESS: list[Reply] = [
    verdict(False, "a redder fox"),
    verdict(False, "a redder fox"),
    format_ranking([2, 1, 3], "the second is sharpest"),
    accepting("the fox sleeps", 200),
    accepting("the fox sleeps", 200),
    format_review([Flag(step=2, reason=REASON)]),
    verdict(True),
]
