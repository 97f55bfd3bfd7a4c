"""Local chat backend on transformers: any Qwen3-VL checkpoint (HF id or folder), as the release runs it.

Decoding: ``temperature=None`` leaves the checkpoint's ``generation_config.json`` in charge (sampling,
temperature, top-p, top-k), as the release's ``generate(**inputs, max_new_tokens=...)``; 0 is greedy;
a number samples at it. A sampled ``chat`` with a ``seed`` seeds torch first, so the same seed gives the
same reply on the same machine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Unpack

from interleave_thinker.backends._images import apply_max_pixels
from interleave_thinker.backends._loading import not_found, pick_device, pick_dtype, resolve_checkpoint
from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    Message,
    VLMBatchMixin,
)
from interleave_thinker.core.errors import BackendError, InputError

_SAMPLING_LOCK = threading.Lock()
"""Held by a seeded sampled call from seeding to its last draw (``TransformersVLMBackend._seeded``)."""


class TransformersVLMBackend(VLMBatchMixin):
    """``AutoProcessor`` + ``AutoModelForImageTextToText``; decoding as :func:`decoding_kwargs` says."""

    extra_generation: Callable[[list[Message], int], dict[str, Any]] | None = None
    """Keywords added to one conversation's ``generate``, given its messages and the prompt's length in
    tokens: how the tiny kind imposes a reply format on its stand-ins (``tiny/formats.py``). None: none."""

    def __init__(
        self,
        checkpoint: str,
        *,
        device: str | None = None,
        dtype: str = "auto",
        attn_implementation: str | None = None,
    ) -> None:
        self.name = f"transformers:{checkpoint}"
        self.checkpoint = resolve_checkpoint(checkpoint)
        self.device = pick_device(device)
        self.processor, self.model = self._load(device == "auto", dtype, attn_implementation)
        image_processor = getattr(self.processor, "image_processor", None)
        self.pixel_factor = int(getattr(image_processor, "patch_size", 16)) * int(
            getattr(image_processor, "merge_size", 2)
        )

    def _load(self, device_map_auto: bool, dtype: str, attn_implementation: str | None) -> tuple[Any, Any]:
        try:
            from transformers import AutoModelForImageTextToText, AutoProcessor
        except ImportError as exc:  # pragma: no cover - transformers is a dependency
            raise BackendError("The transformers backend needs `pip install transformers`.") from exc
        kwargs: dict[str, Any] = {"dtype": pick_dtype(dtype, self.device)}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        if device_map_auto:
            kwargs["device_map"] = "auto"
        try:
            processor = AutoProcessor.from_pretrained(self.checkpoint)
            model = AutoModelForImageTextToText.from_pretrained(self.checkpoint, **kwargs)
        except (OSError, ValueError) as exc:
            raise not_found(self.checkpoint, exc) from exc
        if not device_map_auto:
            model = model.to(self.device)
        model.eval()
        # Replies must start at the same column in a batch; set once here, because flipping it per call
        # races when several threads share this backend.
        processor.tokenizer.padding_side = "left"
        return processor, model

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        return self._generate([messages], call.max_new_tokens, call.temperature, call.seed)[0]

    def _chat_many(
        self, conversations: list[list[Message]], max_new_tokens: int, temperature: float | None
    ) -> list[str]:
        """One ``generate`` over several conversations, left-padded so every reply starts at the same column."""
        return self._generate(conversations, max_new_tokens, temperature, None)

    def _generate(
        self,
        conversations: list[list[Message]],
        max_new_tokens: int,
        temperature: float | None,
        seed: int | None,
    ) -> list[str]:
        import torch

        extra = self.extra_generation
        if extra is not None and len(conversations) > 1 and any(extra(c, 0) for c in conversations):
            # a conversation with keywords of its own (an imposed reply format) is generated alone
            return [self._generate([c], max_new_tokens, temperature, seed)[0] for c in conversations]
        prepared = [apply_max_pixels(m, self.pixel_factor) for m in conversations]
        try:
            inputs = self.processor.apply_chat_template(
                prepared if len(prepared) > 1 else prepared[0],
                tokenize=True,
                add_generation_prompt=True,
                return_dict=True,
                return_tensors="pt",
                processor_kwargs={"padding": len(prepared) > 1},
            ).to(self.model.device)
        except ValueError as exc:  # the processor's own rules on its inputs (Qwen3-VL: aspect under 200:1)
            raise InputError(f"{self.name}: the processor refused the conversation: {exc}") from exc
        try:
            generation = {"max_new_tokens": max_new_tokens, **decoding_kwargs(temperature)}
            if extra is not None and len(conversations) == 1:
                generation.update(extra(conversations[0], inputs["input_ids"].shape[1]))
            with torch.inference_mode(), self._seeded(seed if self._samples(temperature) else None):
                output = self.model.generate(**inputs, **generation)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"{self.name}: generation failed: {exc}") from exc
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return [
            str(text).strip() for text in self.processor.batch_decode(new_tokens, skip_special_tokens=True)
        ]

    def _samples(self, temperature: float | None) -> bool:
        """Whether a call with ``temperature`` samples: the checkpoint's ``do_sample`` when None."""
        if temperature is None:
            return bool(getattr(self.model.generation_config, "do_sample", False))
        return temperature > 0

    @contextmanager
    def _seeded(self, seed: int | None) -> Iterator[None]:
        """Torch's generators seeded with ``seed`` for one sampled call, and restored after it.

        ``generate`` takes no generator, so sampling draws from torch's global one: the lock keeps two
        sampled calls (on any model of this process) from interleaving their draws, and ``fork_rng``
        leaves the global state as it was for everything else. A greedy call draws nothing: no lock.
        """
        if seed is None:
            yield
            return
        import torch

        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with _SAMPLING_LOCK, torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield


MIN_SAMPLING_TEMPERATURE = 0.01
"""The lowest temperature sampled at; lower positive ones are raised to it, as vLLM's ``SamplingParams``
raises them (its ``_MAX_TEMP``), so that the softmax of the scaled logits stays finite."""


def decoding_kwargs(temperature: float | None) -> dict[str, Any]:
    """``generate`` keywords over the checkpoint's generation config: none for None (the config decides,
    as the release calls ``generate(**inputs, max_new_tokens=...)``), greedy for 0 (sampling knobs
    cleared so transformers does not warn about them), else sampling at ``temperature`` with the
    config's other knobs (top-p, top-k). A temperature under :data:`MIN_SAMPLING_TEMPERATURE` samples at
    that one, as vLLM raises it (``1e-300`` would divide the logits into inf and NaN)."""
    if temperature is None:
        return {}
    if temperature > 0:
        return {"do_sample": True, "temperature": max(temperature, MIN_SAMPLING_TEMPERATURE)}
    return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
