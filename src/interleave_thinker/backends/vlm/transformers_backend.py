"""Local chat backend on transformers: any Qwen3-VL checkpoint (HF id or folder), as the release runs it."""

from __future__ import annotations

from typing import Any

from interleave_thinker.backends._images import apply_max_pixels
from interleave_thinker.backends._loading import not_found, pick_device, pick_dtype, resolve_checkpoint
from interleave_thinker.backends.protocols import Message, VLMBatchMixin
from interleave_thinker.core.errors import BackendError


class TransformersVLMBackend(VLMBatchMixin):
    """``AutoProcessor`` + ``AutoModelForImageTextToText``; greedy unless a temperature is asked for."""

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

    def chat(self, messages: list[Message], *, max_new_tokens: int = 4096, temperature: float = 0.0) -> str:
        return self.chat_batch([messages], max_new_tokens=max_new_tokens, temperature=temperature)[0]

    def chat_batch(
        self, conversations: list[list[Message]], *, max_new_tokens: int = 4096, temperature: float = 0.0
    ) -> list[str]:
        """One ``generate`` over several conversations, left-padded so every reply starts at the same column."""
        import torch

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
            generation: dict[str, Any] = {"max_new_tokens": max_new_tokens}
            if temperature > 0:
                generation.update(do_sample=True, temperature=temperature)
            else:
                generation.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            with torch.inference_mode():
                output = self.model.generate(**inputs, **generation)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"{self.name}: generation failed: {exc}") from exc
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return [
            str(text).strip() for text in self.processor.batch_decode(new_tokens, skip_special_tokens=True)
        ]
