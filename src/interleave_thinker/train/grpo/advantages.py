"""What our GRPO trainer changes in TRL's scoring step: the advantage epsilon and the advantage clip.

``training.advantage_epsilon``: EasyR1 divides a group's centred rewards by the group's Bessel std + 1e-6
(``core_algos.py:194-208`` of the release); TRL 1.16 hard-codes + 1e-4. Both use the same std, so TRL's
advantages ``a = d / (s + 1e-4)`` become EasyR1's by one factor per group: the Bessel std of ``a`` is
``k = s / (s + 1e-4)``, and ``d / (s + e) = a * 1e-4 / (1e-4 * k + e * (1 - k))`` (exact, and stable
when ``k`` is near 1). The factor needs the whole group, which TRL spreads over the processes, so it is
computed on the gathered advantages TRL keeps for logging (the last ``generation_batch_size`` entries of
``_logs["advantages"]``) and the process's slice is rescaled.

``training.advantage_clip``: the FastVideo branch's critic GRPO config clips advantages at 5 (``advantage_clip:
5.0`` in ``examples/train/configs/rl/interleave_thinker/critic_grpo.yaml``). A group of n rollouts
normalised by its Bessel std never exceeds (n-1)/sqrt(n) in size (2.47 for 8), so that clip never binds
with 8 rollouts; it is kept as an option. ``advantages/clipped_fraction`` says how many it touched.
TRL's logged advantages (``completions/*.parquet``) are its own, before either change.
"""

from __future__ import annotations

from typing import Any

TRL_EPSILON = 1e-4
"""What TRL 1.16 adds to the group std (``grpo_trainer.py``, ``advantages / (std_rewards + 1e-4)``)."""


def clip_advantages(advantages: Any, limit: float) -> tuple[Any, float]:
    """``advantages`` (a tensor) clamped to [-limit, limit], and the fraction of them the clamp changed."""
    clipped = advantages.clamp(-limit, limit)
    changed = float((clipped != advantages).float().mean().item()) if advantages.numel() else 0.0
    return clipped, changed


def epsilon_factors(all_advantages: Any, group: int, epsilon: float) -> Any:
    """Per completion, the factor that turns TRL's advantages (std + 1e-4) into ``epsilon``'s (std + epsilon);
    ``all_advantages`` holds whole groups of ``group`` in order (TRL's gathered advantages)."""
    import torch

    grouped = all_advantages.double().view(-1, group)
    k = grouped.std(dim=1, unbiased=True)  # = s / (s + 1e-4) for TRL's group std s
    factor = TRL_EPSILON / (TRL_EPSILON * k + epsilon * (1 - k))
    factor = torch.where(k > 0, factor, torch.ones_like(factor))  # a zero-std group has zero advantages
    return factor.repeat_interleave(group).to(all_advantages.dtype)


def with_advantage_settings(
    trainer_class: type[Any], *, clip: float | None, epsilon: float = TRL_EPSILON
) -> type[Any]:
    """``trainer_class`` itself when both are TRL's (no clip, epsilon 1e-4), else a subclass whose scoring
    step rescales the advantages to ``epsilon`` and then clips them to [-clip, clip]."""
    if clip is None and epsilon == TRL_EPSILON:
        return trainer_class
    bound = None if clip is None else float(clip)
    eps = float(epsilon)

    class AdvantageTrainer(trainer_class):
        advantage_clip = bound
        advantage_epsilon = eps

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            output = super()._generate_and_score_completions(inputs)
            mode = "train" if self.model.training else "eval"
            if self.advantage_epsilon != TRL_EPSILON and mode == "train":
                output["advantages"] = output["advantages"] * self._local_factors(len(output["advantages"]))
            if self.advantage_clip is not None:
                output["advantages"], changed = clip_advantages(output["advantages"], self.advantage_clip)
                self._metrics[mode]["advantages/clipped_fraction"].append(changed)
            return output

        def _local_factors(self, local: int) -> Any:
            import torch

            total = local * self.accelerator.num_processes
            logged = list(self._logs["advantages"])[-total:]
            if len(logged) != total:
                raise RuntimeError(
                    f"advantage_epsilon: TRL kept {len(logged)} gathered advantages, expected {total}"
                )
            factors = epsilon_factors(torch.tensor(logged), self.num_generations, self.advantage_epsilon)
            start = self.accelerator.process_index * local
            return factors[start : start + local].to(self.accelerator.device)

    AdvantageTrainer.__name__ = AdvantageTrainer.__qualname__ = f"Advantage{trainer_class.__name__}"
    return AdvantageTrainer


def with_advantage_clip(trainer_class: type[Any], limit: float | None) -> type[Any]:
    """``trainer_class`` itself when ``limit`` is None, else a subclass that clips every batch's advantages."""
    return with_advantage_settings(trainer_class, clip=limit)
