"""What stops GRPO's step-wise reward from training on fallbacks alone (docs/failures.md).

Before TRL is imported, :func:`~interleave_thinker.train.rewards.critic.preflight_stepwise` asks a served generator for one image and a served
judge for one SC and one PQ judgement, which must parse (``remote.preflight``, ``--no-preflight``).
While training, :class:`FailureBudget` counts the judged samples whose judge or generator failed (each
still scores 0.5, as released) over the last ``reward.failure_window`` logging steps; past
``reward.max_failure_share`` it saves a checkpoint and stops, naming the share, the most frequent error
and the backend; ``--resume`` continues after the fix.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from transformers import TrainerCallback

from interleave_thinker.backends.wrapping import backend_spec
from interleave_thinker.train.rewards.critic import StepwiseScorer, StepwiseTally


class FailureBudget(TrainerCallback):
    """Stops training (a checkpoint saved first) when more than ``limit`` of the judged step-wise samples
    of the last ``window`` logging steps failed; :attr:`stopped` says why. Not at the last step: that run
    ends anyway, its counts in the command's last lines."""

    def __init__(self, scorer: StepwiseScorer, limit: float, window: int) -> None:
        self.scorer, self.limit, self.window = scorer, limit, window
        self.slots: deque[tuple[int, StepwiseTally]] = deque(maxlen=window)
        self.stopped: str | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step % max(1, args.logging_steps):
            return control
        self.slots.append((state.global_step, self.scorer.take_tally()))
        if len(self.slots) < self.window or (state.max_steps > 0 and state.global_step >= state.max_steps):
            return control
        tally = StepwiseTally()
        for _, slot in self.slots:
            tally.merge(slot)
        judged, failed = _summed(tally.judged, tally.failed)
        if judged and failed / judged > self.limit:
            self.stopped = self.reason(tally, judged, failed, state.global_step, args.output_dir)
            control.should_training_stop = True
            control.should_save = True  # the stop's checkpoint is what --resume continues
        return control

    def reason(self, tally: StepwiseTally, judged: int, failed: int, step: int, output_dir: str) -> str:
        first = self.slots[0][0]
        steps = f"steps {first}-{step}" if first != step else f"step {step}"
        if tally.errors:
            (role, error), times = tally.errors.most_common(1)[0]
            backend = self.scorer.judge.backend if role == "judge" else self.scorer.generator
            spec = backend_spec(backend) or type(backend).__name__
            cause = f"most frequent error ({times}x), from the {role} {spec}: {error}"
        else:
            role, cause = "judge", "the failures were on other processes"
        return (
            f"step-wise reward failed for {failed} of {judged} judged samples ({failed / judged:.0%}) over the "
            f"last {len(self.slots)} logging steps ({steps}), above the tolerated {self.limit:.0%} "
            f"(reward.max_failure_share); {cause}. Training stopped at step {step}, its checkpoint kept in "
            f"{output_dir}; fix the {role} and run the same command with --resume to continue."
        )


def _summed(judged: int, failed: int) -> tuple[int, int]:
    """The counts over every process of a distributed run (each scores its own slice of the rollouts),
    so that every rank stops at the same step."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return judged, failed
    import torch
    from accelerate import PartialState

    counts = torch.tensor([judged, failed], dtype=torch.long, device=PartialState().device)
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])
