"""Image backend on the OpenAI Images API (``gpt-image-*``, ``dall-e-*``, or any server speaking it).

Spec: ``openai-images:MODEL[@BASE_URL]``, e.g. ``openai-images:gpt-image-1`` or
``openai-images:my-model@http://127.0.0.1:8000/v1``. The base URL defaults to ``https://api.openai.com/v1``.

Wire format (OpenAI API reference and the ``openai-python`` types ``ImageGenerateParams``,
``ImageEditParams``, ``ImagesResponse``):

- text-to-image: ``POST {base}/images/generations`` with JSON ``{model, prompt, n: 1, size: "WxH"}``;
- edit: ``POST {base}/images/edits`` as ``multipart/form-data`` with the file field ``image`` (PNG) and
  the form fields ``model``, ``prompt``, ``n``, ``size``;
- reply ``{"created", "data": [{"b64_json": ...} | {"url": ...}], ...}``; errors
  ``{"error": {"message", "type", "param", "code"}}``.

GPT image models always answer base64 and reject ``response_format``; it is sent (as ``b64_json``) only
to ``dall-e-*`` models and to unknown models on other servers. A reply carrying only a ``url`` is fetched.

What the API cannot do, and what we do instead:

- **Seeds**: the API has no seed, so ``seed`` is ignored and results are not reproducible. ``steps`` and
  ``guidance`` are ignored too.
- **Sizes**: each model accepts a few sizes (gpt-image-1/1.5/mini: 1024x1024, 1536x1024, 1024x1536;
  dall-e-3: 1024x1024, 1792x1024, 1024x1792; dall-e-2: 256, 512, 1024 squares; gpt-image-2: any size with
  sides divisible by 16 and an aspect between 1:3 and 3:1). We ask for the supported size nearest to the
  requested one (closest aspect, then closest area) and center-crop and resize the result to the
  requested size. Models we do not know (other servers) get the requested size unchanged.

Retries (408, 429, 5xx, timeouts, connection errors; none on other 4xx) go through
:class:`~interleave_thinker.backends.remote.RemoteCaller`. The API key is read from the environment only
(``OPENAI_API_KEY`` or ``remote.api_key_env``), is sent as a bearer header, and never appears in logs or
errors.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
from PIL import Image, ImageOps, UnidentifiedImageError

from interleave_thinker.backends.protocols import ImageBatchMixin
from interleave_thinker.backends.remote import (
    RETRYABLE_STATUS,
    EndpointPool,
    RemoteCaller,
    RetryableError,
    RetrySettings,
    parse_retry_after,
)
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"

GPT_IMAGE_SIZES = ((1024, 1024), (1536, 1024), (1024, 1536))
DALLE3_SIZES = ((1024, 1024), (1792, 1024), (1024, 1792))
DALLE2_SIZES = ((256, 256), (512, 512), (1024, 1024))


def parse_target(target: str) -> tuple[str, str]:
    """``MODEL[@BASE_URL]`` -> (model, base URL); the base URL defaults to the OpenAI API."""
    model, sep, base_url = target.partition("@")
    model, base_url = model.strip(), base_url.strip()
    if not model:
        raise ConfigError(
            f"openai-images spec {target!r} has no model; write openai-images:MODEL[@BASE_URL], "
            "e.g. 'openai-images:gpt-image-1'."
        )
    if sep and not base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"openai-images spec {target!r}: the base URL after '@' must start with http:// or https://, "
            "e.g. 'openai-images:gpt-image-1@http://127.0.0.1:8000/v1'."
        )
    return model, (base_url or DEFAULT_BASE_URL).rstrip("/")


def _nearest(width: int, height: int, sizes: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The size whose aspect ratio is closest to ``width/height`` (log scale), then whose area is."""
    aspect = math.log(width / height)
    return min(
        sizes,
        key=lambda s: (round(abs(math.log(s[0] / s[1]) - aspect), 6), abs(s[0] * s[1] - width * height)),
    )


def _flexible_size(width: int, height: int) -> tuple[int, int]:
    """gpt-image-2 rules: sides divisible by 16, aspect within 1:3..3:1, at most 3840x2160 pixels and edge."""
    w, h = float(width), float(height)
    ratio = min(3.0, max(1 / 3, w / h))
    if ratio != w / h or w * h > 3840 * 2160:
        area = min(w * h, 3840 * 2160)
        w = math.sqrt(area * ratio)
        h = w / ratio
    scale = min(1.0, 3840 / max(w, h))
    w16, h16 = (max(16, math.floor(v * scale / 16 + 0.5) * 16) for v in (w, h))
    while w16 > 3 * h16:  # rounding must not push the aspect past 3:1
        w16 -= 16
    while h16 > 3 * w16:
        h16 -= 16
    return w16, h16


def api_size(model: str, width: int, height: int) -> tuple[int, int]:
    """The size to ask ``model`` for when the caller wants ``width`` x ``height``."""
    name = model.lower()
    if name.startswith("dall-e-2"):
        return _nearest(width, height, DALLE2_SIZES)
    if name.startswith("dall-e-3"):
        return _nearest(width, height, DALLE3_SIZES)
    if name.startswith("gpt-image-2"):
        return _flexible_size(width, height)
    if name.startswith(("gpt-image-", "chatgpt-image")):
        return _nearest(width, height, GPT_IMAGE_SIZES)
    return width, height


def _fit(image: Image.Image, width: int, height: int) -> Image.Image:
    """Center-crop to the requested aspect and resize, so a nearby API size never distorts the picture."""
    image = image.convert("RGB")
    if image.size == (width, height):
        return image
    return ImageOps.fit(image, (width, height), Image.Resampling.LANCZOS)


def _error_detail(response: httpx.Response, scrub: Callable[[str], str]) -> str:
    """The message of an OpenAI error body ``{"error": {"message", "type", "code"}}``, else the raw text;
    scrubbed of secrets before it is cut, so no prefix of a key survives."""
    try:
        body = response.json()
    except ValueError:
        return scrub(response.text)[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return scrub(response.text)[:300]
    kinds = ", ".join(str(error[k]) for k in ("type", "code") if error.get(k))
    message = str(error.get("message") or "").strip() or "no message"
    return scrub(f"{message} ({kinds})" if kinds else message)[:500]


class OpenAIImagesBackend(ImageBatchMixin):
    """Text-to-image and edits through ``/images/generations`` and ``/images/edits``; see the module doc."""

    def __init__(
        self, model: str, *, base_url: str = DEFAULT_BASE_URL, remote: RemoteOptions | None = None
    ) -> None:
        remote = remote or RemoteOptions()
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.name = f"openai-images:{model}"
        self.key_env = remote.api_key_env or DEFAULT_KEY_ENV
        retry = RetrySettings.from_options(remote)
        pool = EndpointPool([self.base_url], cooldown=remote.cooldown)
        self._caller = RemoteCaller(
            self.name, pool, retry=retry, concurrency=remote.concurrency, headers=self._auth_headers(remote)
        )

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OpenAIImagesBackend:
        model, base_url = parse_target(target)
        return cls(model, base_url=base_url, remote=options.remote)

    def _auth_headers(self, remote: RemoteOptions) -> dict[str, str]:
        """Bearer header from the environment; required for api.openai.com or when a variable is named."""
        key = os.environ.get(self.key_env, "").strip()
        if key:
            return {"Authorization": f"Bearer {key}"}
        if self.base_url == DEFAULT_BASE_URL or remote.api_key_env:
            raise BackendError(
                f"{self.name}: no API key: the environment variable {self.key_env} is not set. "
                f"Export {self.key_env}=<your key> (or set remote.api_key_env to the variable that holds it)."
            )
        return {}

    def generate(
        self,
        prompt: str,
        *,
        image: Image.Image | None = None,
        width: int = 1024,
        height: int = 1024,
        seed: int = 0,
        steps: int | None = None,
        guidance: float | None = None,
    ) -> Image.Image:
        """One image; ``seed``, ``steps`` and ``guidance`` are ignored (the API has no such knobs)."""
        # 1. Check inputs and pick the size the model supports.
        if image is not None and self.model.lower().startswith("dall-e-3"):
            raise BackendError(
                f"{self.name}: dall-e-3 cannot edit images (no /images/edits support); "
                "use a GPT image model such as 'openai-images:gpt-image-1'."
            )
        size = "{}x{}".format(*api_size(self.model, width, height))
        # 2. Send the request (retried by the caller) and decode the reply.
        if image is None:
            payload: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": 1, "size": size}
            payload.update(self._response_format())
            result = self._caller.call(
                lambda c, url, t: self._post(c, f"{url}/images/generations", t, json=payload)
            )
        else:
            png = io.BytesIO()
            image.convert("RGB").save(png, format="PNG")
            fields = {
                "model": self.model,
                "prompt": prompt,
                "n": "1",
                "size": size,
                **self._response_format(),
            }
            files = {"image": ("image.png", png.getvalue(), "image/png")}
            result = self._caller.call(
                lambda c, url, t: self._post(c, f"{url}/images/edits", t, data=fields, files=files)
            )
        # 3. Fit the result to the requested size.
        return _fit(result, width, height)

    def _response_format(self) -> dict[str, str]:
        """GPT image models reject ``response_format`` (they always answer base64); others need it."""
        if self.model.lower().startswith(("gpt-image-", "chatgpt-image")):
            return {}
        return {"response_format": "b64_json"}

    def _post(self, client: httpx.Client, url: str, timeout: float, **kwargs: Any) -> Image.Image:
        """One try: POST, check the status, and read the first image of the reply (fetching a ``url``)."""
        response = client.post(url, timeout=timeout, **kwargs)
        self._check(response)
        try:
            item = response.json()["data"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"{self.name}: the reply from {url} has no image in data[0]: "
                f"{self._caller.scrub(response.text)[:200]}"
            ) from exc
        if item.get("b64_json"):
            try:
                raw = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise BackendError(f"{self.name}: data[0].b64_json from {url} is not valid base64.") from exc
        elif item.get("url"):
            fetched = client.send(self._download_request(client, str(item["url"]), timeout))
            self._check(fetched)
            raw = fetched.content
        else:
            raise BackendError(f"{self.name}: data[0] from {url} has neither b64_json nor url.")
        try:
            with Image.open(io.BytesIO(raw)) as decoded:
                decoded.load()
                return decoded.convert("RGB")
        except (UnidentifiedImageError, OSError) as exc:
            raise BackendError(f"{self.name}: the image returned by {url} cannot be decoded.") from exc

    def _download_request(self, client: httpx.Client, url: str, timeout: float) -> httpx.Request:
        """A GET for an image ``url``; the bearer key goes only to the API's own host, never to storage."""
        request = client.build_request("GET", url, timeout=timeout)
        if request.url.host != httpx.URL(self.base_url).host:
            request.headers.pop("Authorization", None)
        return request

    def _check(self, response: httpx.Response) -> None:
        """408/429/5xx ask for a retry; other errors end the call with the API's own message."""
        if response.status_code in RETRYABLE_STATUS:
            raise RetryableError(
                f"HTTP {response.status_code}: {_error_detail(response, self._caller.scrub)}",
                parse_retry_after(response),
            )
        if response.status_code < 400:
            return
        hint = ""
        if response.status_code in (401, 403):
            hint = f" Check that {self.key_env} holds a valid key with access to {self.model}."
        elif response.status_code == 404:
            hint = f" Check the model name '{self.model}' and the base URL {self.base_url}."
        raise BackendError(
            f"{self.name}: HTTP {response.status_code} from {response.url}: "
            f"{_error_detail(response, self._caller.scrub)}.{hint}"
        )

    def close(self) -> None:
        self._caller.close()

    def __enter__(self) -> OpenAIImagesBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
