"""``training.advantage_clip``: advantages clipped to [-c, c] after TRL's group normalisation.

Why: the FastVideo branch's critic GRPO config clips advantages at 5 (``advantage_clip: 5.0`` in
``examples/train/configs/rl/interleave_thinker/critic_grpo.yaml``), after normalising each group by
its mean and standard deviation as TRL does. TRL has no such option, so this is the one place our
trainer changes TRL's: a subclass whose scoring step clamps the advantages it hands to the loss. TRL's
logged advantages (``completions/*.parquet``) are the unclipped ones; ``advantages/clipped_fraction``
says how many the clip touched.
"""

from __future__ import annotations

from typing import Any


def clip_advantages(advantages: Any, limit: float) -> tuple[Any, float]:
    """``advantages`` (a tensor) clamped to [-limit, limit], and the fraction of them the clamp changed."""
    clipped = advantages.clamp(-limit, limit)
    changed = float((clipped != advantages).float().mean().item()) if advantages.numel() else 0.0
    return clipped, changed


def with_advantage_clip(trainer_class: type[Any], limit: float | None) -> type[Any]:
    """``trainer_class`` itself when ``limit`` is None, else a subclass that clips every batch's advantages."""
    if limit is None:
        return trainer_class
    bound = float(limit)

    class AdvantageClipTrainer(trainer_class):
        advantage_clip = bound

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            output = super()._generate_and_score_completions(inputs)
            output["advantages"], changed = clip_advantages(output["advantages"], self.advantage_clip)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["advantages/clipped_fraction"].append(changed)
            return output

    AdvantageClipTrainer.__name__ = AdvantageClipTrainer.__qualname__ = (
        f"AdvantageClip{trainer_class.__name__}"
    )
    return AdvantageClipTrainer
