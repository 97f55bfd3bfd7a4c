"""Image backend on Gemini image models ("Nano Banana") through the ``google-genai`` SDK.

Spec: ``gemini-image:MODEL_OR_ALIAS``; aliases ``nano-banana`` -> ``gemini-2.5-flash-image``,
``nano-banana-pro`` -> ``gemini-3-pro-image``, ``nano-banana-2`` -> ``gemini-3.1-flash-image`` (the ids
the InterleaveThinker authors used). Install with ``pip install 'interleave-thinker[gemini]'``.

SDK surface used (``googleapis/python-genai``: ``client.py``, ``models.py``, ``types.py``, ``errors.py``):

- ``genai.Client(api_key=..., http_options={"timeout": ms})`` and ``client.close()``;
- ``client.models.generate_content(model=..., contents=[prompt, image part?], config={...})`` in the
  SDK's dict forms: the image to edit as a ``PartDict`` ``{"inline_data": {"data": PNG bytes,
  "mime_type": "image/png"}}`` (lossless; the SDK would JPEG-encode an RGB ``PIL.Image``, see
  ``_transformers.pil_to_blob``), reference images after it as further parts in order, and the config
  as a ``GenerateContentConfigDict``:
  ``response_modalities=["TEXT", "IMAGE"]``, ``seed``, ``image_config={"aspect_ratio", "image_size"}``;
- the reply's ``candidates[0].content.parts[i]`` with ``inline_data.data`` (bytes) and
  ``inline_data.mime_type``, ``text`` and ``thought`` (Gemini 3 image models also return interim "thought"
  images, which are skipped); ``candidates[0].finish_reason`` / ``finish_message`` and
  ``prompt_feedback.block_reason`` / ``block_reason_message`` explain a reply without an image;
- errors: ``google.genai.errors.APIError`` with an integer ``code`` (HTTP status), ``status``, ``message``.

Behaviour:

- **Retries** on errors whose ``code`` is 408, 429 or 5xx except 501 (``remote.is_retryable_status``)
  and on transport timeouts/connection errors,
  through :class:`~interleave_thinker.backends.remote.RemoteCaller` (as the Gemini chat backend does):
  its backoff, deadline and concurrency limit; none on other 4xx.
- **No image** in the reply (safety block, text-only answer) is a :class:`BackendError` that quotes the
  text the model returned and the finish/block reason.
- **Seed** is sent as ``config.seed`` (a documented ``GenerateContentConfig`` field); the service does not
  promise deterministic images for it. ``steps`` and ``guidance`` are ignored.
- **Size**: the API takes an aspect ratio (and, on Gemini 3 models, a ``1K``/``2K``/``4K`` size), not
  pixels. We ask for the supported aspect ratio nearest to the requested size (and ``2K``/``4K`` when the
  request is larger than 1K on Gemini 3), then center-crop and resize the result to the requested size.
- **References**: Gemini 2.5 Flash Image takes at most 3 input images for best results, Gemini 3 image
  models 14 (Google Cloud, "Gemini image generation limitations"), the edited image among them.
- **Key** from ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``, which the SDK also reads), or the variable named
  by ``remote.api_key_env``; never logged nor put in errors.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PIL import Image

from interleave_thinker.backends._images import fit_to_size
from interleave_thinker.backends.encoding import png_bytes
from interleave_thinker.backends.gemini_sdk import GeminiSDKBackend
from interleave_thinker.backends.image.pooled import PooledImageBackend
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.references import check_request, wire_images
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

logger = logging.getLogger(__name__)

ALIASES = {
    "nano-banana": "gemini-2.5-flash-image",
    "nano-banana-pro": "gemini-3-pro-image",
    "nano-banana-2": "gemini-3.1-flash-image",
}
ASPECT_RATIOS = ("1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9")


def resolve_model(name: str) -> str:
    """An alias such as ``nano-banana-pro`` -> its Gemini model id; other names pass through."""
    model = ALIASES.get(name.strip(), name.strip())
    if not model:
        raise ConfigError(
            "gemini-image spec has no model; write gemini-image:MODEL_OR_ALIAS, e.g. "
            f"'gemini-image:nano-banana-pro' (aliases: {', '.join(sorted(ALIASES))})."
        )
    return model


def aspect_ratio(width: int, height: int) -> str:
    """The supported aspect ratio closest to ``width:height`` on a log scale."""
    target = math.log(width / height)

    def distance(ratio: str) -> float:
        w, h = ratio.split(":")
        return abs(math.log(int(w) / int(h)) - target)

    return min(ASPECT_RATIOS, key=distance)


def image_config(model: str, width: int, height: int) -> dict[str, str]:
    """``ImageConfig`` fields for a request of ``width`` x ``height`` pixels."""
    config = {"aspect_ratio": aspect_ratio(width, height)}
    longest = max(width, height)
    if model.startswith("gemini-3") and longest > 1024:  # image_size exists on Gemini 3 image models only
        config["image_size"] = "2K" if longest <= 2048 else "4K"
    return config


def reference_cap(model: str) -> int:
    """References beside the edited image: 13 on Gemini 3 image models (14 inputs), else 2 (3 inputs)."""
    return 13 if model.startswith("gemini-3") else 2


def _name(value: Any) -> str:
    """An SDK enum (``FinishReason.SAFETY``) or a plain string as its bare value."""
    return str(getattr(value, "value", value))


class GeminiImageBackend(GeminiSDKBackend, PooledImageBackend):
    """Text-to-image and edits with Gemini image models; see the module doc for the SDK surface used."""

    key_hint = "Check that the API key is valid for {b.model}"
    not_found_hint = "Check the model id '{b.model}'"

    def __init__(
        self,
        model: str,
        *,
        remote: RemoteOptions | None = None,
        client: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        remote = remote or RemoteOptions()
        self.model = resolve_model(model)
        self.name = f"gemini-image:{self.model}"
        self.max_references = reference_cap(self.model)
        self.concurrency = remote.concurrency
        self.retry = RetrySettings.from_options(remote)
        self.open_client(client, remote.api_key_env, remote.concurrency, sleep)

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> GeminiImageBackend:
        return cls(target, remote=options.remote)

    def generate(self, request: ImageRequest) -> Image.Image:
        """One image; ``steps`` and ``guidance`` are ignored, ``seed`` is passed but not guaranteed."""
        # 1. Build the request: the prompt, then the image to edit (if any) and the references.
        check_request(self.name, self.max_references, request)
        contents: list[Any] = [request.prompt]
        for image in wire_images(request):
            contents.append({"inline_data": {"data": png_bytes(image), "mime_type": "image/png"}})
        config = {
            "response_modalities": ["TEXT", "IMAGE"],
            "seed": request.seed,
            "image_config": image_config(self.model, request.width, request.height),
        }
        # 2. Call with retries, then 3. read the image and fit it to the requested size.
        response = self.caller.call(lambda _client, _url, _timeout: self._generate_once(contents, config))
        return fit_to_size(self._image_from(response), request.width, request.height)

    def _generate_once(self, contents: list[Any], config: dict[str, Any]) -> Any:
        """One SDK call; its errors are translated at the boundary (:meth:`RemoteBackend.sdk_error`)."""
        try:
            return self.client.models.generate_content(model=self.model, contents=contents, config=config)
        except Exception as exc:
            raise self.sdk_error(exc) from exc

    def _image_from(self, response: Any) -> Image.Image:
        """The first non-thought image part of the first candidate; otherwise an error quoting the model."""
        candidates = getattr(response, "candidates", None) or []
        content = getattr(candidates[0], "content", None) if candidates else None
        parts = (getattr(content, "parts", None) or []) if content is not None else []
        texts: list[str] = []
        for part in parts:
            blob = getattr(part, "inline_data", None)
            if blob is not None and getattr(blob, "data", None) and not getattr(part, "thought", False):
                return self._decode(blob.data, getattr(blob, "mime_type", None))
            if getattr(part, "text", None) and not getattr(part, "thought", False):
                texts.append(part.text.strip())
        reasons = []
        if candidates and getattr(candidates[0], "finish_reason", None):
            reasons.append(f"finish_reason={_name(candidates[0].finish_reason)}")
            if getattr(candidates[0], "finish_message", None):
                reasons.append(candidates[0].finish_message)
        feedback = getattr(response, "prompt_feedback", None)
        if feedback is not None and getattr(feedback, "block_reason", None):
            reasons.append(f"prompt blocked: {_name(feedback.block_reason)}")
            if getattr(feedback, "block_reason_message", None):
                reasons.append(feedback.block_reason_message)
        said = " ".join(texts)[:500]
        raise BackendError(
            f"{self.name}: the reply has no image"
            + (f" ({'; '.join(reasons)})" if reasons else "")
            + (f"; the model said: {said!r}" if said else "")
            + ". Rephrase the prompt or try again."
        )

    def _decode(self, data: bytes, mime_type: str | None) -> Image.Image:
        """The reply's image within the bounds of ``remote``: the SDK reads replies whole, so their bytes
        are checked here, after the fact; the pixels from the header, before decoding."""
        limit = self.retry.max_reply_bytes
        if len(data) > limit:
            raise BackendError(
                f"{self.name}: the returned image has {len(data)} bytes, over the limit of {limit} "
                f"(remote.max_reply_mb = {limit / 2**20:g}); raise remote.max_reply_mb."
            )
        return self.reply_image(data, f"the returned {mime_type or 'image'}")
