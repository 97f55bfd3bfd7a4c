"""The seed of every planner and critic call, derived from the run's seed.

Why derived and not drawn: a rerun with the same ``loop.seed_base`` must ask every call with the same
seed, also a resumed run that starts at step 3, so a call's seed depends only on where it stands in
the run (role, step, attempt, the call's place in its turn) and never on what ran before it. Why a
hash and not arithmetic like the generator's ``seed_base + step * 100 + attempt``: planner, critic and
retry seeds must not collide with each other whatever the stride, and a hash keeps them apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

SEED_MODULUS = 2**31
"""Call seeds lie in 0..2**31-1: what ``torch.manual_seed`` and every server's ``seed`` field accept."""


def call_seed(run_seed: int, role: str, step: int, attempt: int, call: int) -> int:
    """The seed of one call: SHA-256 of ``"run_seed/role/step/attempt/call"``, first 8 bytes, mod 2**31.

    >>> call_seed(0, "planner", 0, 0, 0) == call_seed(0, "planner", 0, 0, 0)
    True
    >>> call_seed(0, "critic", 1, 0, 0) != call_seed(0, "critic", 1, 0, 1)
    True
    """
    key = f"{run_seed}/{role}/{step}/{attempt}/{call}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % SEED_MODULUS


@dataclass(frozen=True)
class Turn:
    """Where an agent turn stands in a run: the run's seed (``loop.seed_base``), the step (0 for the
    plan) and the generator attempt it is about (0 for the plan)."""

    run_seed: int
    step: int = 0
    attempt: int = 0

    def seed(self, role: str, call: int) -> int:
        """The seed of the turn's ``call``-th model call (0 = first, 1 = first retry, ...)."""
        return call_seed(self.run_seed, role, self.step, self.attempt, call)
