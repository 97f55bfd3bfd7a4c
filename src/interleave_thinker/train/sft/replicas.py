"""Check that data-parallel replicas hold the same weights (``training.replica_check_steps``).

Why: under DDP every process keeps a full copy of the model and the copies stay equal only while every
rank applies the same averaged gradient. A rank that skips a step, sees a different learning rate or
frees a parameter from the gradient sync drifts silently; the loss still falls. Every N steps each rank
hashes its trainable parameters, the digests are gathered, the main process appends them to
``output_dir/replicas.jsonl`` (``{"step": N, "digests": [rank 0, rank 1, ...]}``) and any mismatch
stops training with an error naming the step. Under DeepSpeed ZeRO-3 or FSDP each rank holds a
different shard, so the check is skipped there (with a warning).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.core.no_follow import open_append

logger = logging.getLogger(__name__)

REPLICA_LOG = "replicas.jsonl"
SHARDED = ("DEEPSPEED", "FSDP")


def weight_digest(model: Any) -> str:
    """SHA-256 over the trainable parameters' names, shapes and bytes (float tensors as stored)."""
    import torch

    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        tensor = param.detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def replica_callback(every: int, output_dir: Path) -> Any:
    """A ``transformers.TrainerCallback`` running the check every ``every`` optimizer steps (and at step 0)."""
    from transformers import TrainerCallback

    class ReplicaCheck(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            _check(args, state.global_step, kwargs.get("model"), output_dir)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % every == 0:
                _check(args, state.global_step, kwargs.get("model"), output_dir)

    return ReplicaCheck()


def _check(args: Any, step: int, model: Any, output_dir: Path) -> None:
    from accelerate import PartialState
    from accelerate.utils import gather_object

    state = PartialState()
    if model is None or state.num_processes < 2:
        return
    if any(kind in str(state.distributed_type) for kind in SHARDED):
        if step == 0:
            logger.warning("replica_check_steps: skipped, %s shards the weights", state.distributed_type)
        return
    digests = [str(d) for d in gather_object([weight_digest(model)])]
    if state.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        with open_append(output_dir / REPLICA_LOG) as handle:
            handle.write(json.dumps({"step": step, "digests": digests}) + "\n")
    if len(set(digests)) > 1:
        raise InterleaveThinkerError(
            f"Step {step}: the {len(digests)} data-parallel replicas hold different weights "
            f"(digests {', '.join(d[:12] for d in digests)}); see {output_dir / REPLICA_LOG}. "
            "Check that every rank runs the same steps with the same data sizes and learning rate."
        )
