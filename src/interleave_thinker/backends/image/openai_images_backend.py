"""Image backend on the OpenAI Images API (``gpt-image-*``, ``dall-e-*``, or any server speaking it).

Spec: ``openai-images:MODEL[@BASE_URL]``, e.g. ``openai-images:gpt-image-1`` or
``openai-images:my-model@http://127.0.0.1:8000/v1``. The base URL defaults to ``https://api.openai.com/v1``.

Wire format (OpenAI API reference and the ``openai-python`` types ``ImageGenerateParams``,
``ImageEditParams``, ``ImagesResponse``):

- text-to-image: ``POST {base}/images/generations`` with JSON ``{model, prompt, n: 1, size: "WxH"}``;
- edit: ``POST {base}/images/edits`` as ``multipart/form-data`` with the file field ``image`` (PNG) and
  the form fields ``model``, ``prompt``, ``n``, ``size``; with reference images, one ``image[]`` file
  part per image instead, the edited one first (how ``openai-python`` sends a list: GPT image models
  take up to 16 images, ``dall-e-2`` one);
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

Retries (408, 429, 5xx except 501, timeouts, connection errors; none on 501 or other 4xx) go through
:class:`~interleave_thinker.backends.remote.RemoteCaller`. The API key is read from the environment only
(``OPENAI_API_KEY`` or ``remote.api_key_env``), is sent as a bearer header, and never appears in logs or
errors.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import TYPE_CHECKING, Any

import httpx
from PIL import Image

from interleave_thinker.backends._images import fit_to_size
from interleave_thinker.backends.encoding import png_bytes
from interleave_thinker.backends.image.pooled import PooledImageBackend
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.references import WIRE_MAX_REFERENCES, check_request, file_name, wire_images
from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.remote_backend import key_envs
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


def reference_cap(model: str) -> int:
    """References beside the edited image: ``dall-e-*`` edits one image (dall-e-3 none), GPT image models
    take 16 images; a model we do not know (another server) the same wire's cap."""
    return 0 if model.lower().startswith("dall-e") else WIRE_MAX_REFERENCES


def _error_detail(response: httpx.Response) -> str:
    """The message of an OpenAI error body ``{"error": {"message", "type", "code"}}``, else the raw text
    (scrubbed and cut by the caller)."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return response.text
    kinds = ", ".join(str(error[k]) for k in ("type", "code") if error.get(k))
    message = str(error.get("message") or "").strip() or "no message"
    return f"{message} ({kinds})" if kinds else message


class OpenAIImagesBackend(PooledImageBackend):
    """Text-to-image and edits through ``/images/generations`` and ``/images/edits``; see the module doc."""

    key_hint = "Check that {b.key_envs[0]} holds a valid key with access to {b.model}"
    not_found_hint = "Check the model name '{b.model}' and the base URL {b.base_url}"

    def __init__(
        self, model: str, *, base_url: str = DEFAULT_BASE_URL, remote: RemoteOptions | None = None
    ) -> None:
        remote = remote or RemoteOptions()
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.name = f"openai-images:{model}"
        self.max_references = reference_cap(model)
        self.concurrency = remote.concurrency
        self.key_envs, configured = key_envs(remote.api_key_env, (DEFAULT_KEY_ENV,))
        # Required for api.openai.com or when a variable is named; optional for other servers.
        key = self.api_key(required=configured or self.base_url == DEFAULT_BASE_URL, configured=configured)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        retry = RetrySettings.from_options(remote)
        self.open_caller(
            [self.base_url],
            retry=retry,
            concurrency=remote.concurrency,
            cooldown=remote.cooldown,
            headers=headers,
        )

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OpenAIImagesBackend:
        model, base_url = parse_target(target)
        return cls(model, base_url=base_url, remote=options.remote)

    def generate(self, request: ImageRequest) -> Image.Image:
        """One image; ``seed``, ``steps`` and ``guidance`` are ignored (the API has no such knobs)."""
        # 1. Check inputs and pick the size the model supports.
        check_request(self.name, self.max_references, request)
        images = wire_images(request)
        if images and self.model.lower().startswith("dall-e-3"):
            raise BackendError(
                f"{self.name}: dall-e-3 cannot edit images (no /images/edits support); "
                "use a GPT image model such as 'openai-images:gpt-image-1'."
            )
        asked = api_size(self.model, request.width, request.height)
        size = "{}x{}".format(*asked)
        fields = {
            "model": self.model,
            "prompt": request.prompt,
            "n": 1,
            "size": size,
            **self._response_format(),
        }
        # 2. Send the request (retried by the caller) and decode the reply.
        if not images:
            result = self.caller.call(
                lambda c, url, t: self._post(c, f"{url}/images/generations", t, asked, json=fields)
            )
        else:
            form = {k: str(v) for k, v in fields.items()}
            field = "image[]" if request.references else "image"  # a list, as openai-python sends one
            files = [(field, (file_name(i), png_bytes(image), "image/png")) for i, image in enumerate(images)]
            result = self.caller.call(
                lambda c, url, t: self._post(c, f"{url}/images/edits", t, asked, data=form, files=files)
            )
        # 3. Fit the result to the requested size.
        return fit_to_size(result, request.width, request.height)

    def _response_format(self) -> dict[str, str]:
        """GPT image models reject ``response_format`` (they always answer base64); others need it."""
        if self.model.lower().startswith(("gpt-image-", "chatgpt-image")):
            return {}
        return {"response_format": "b64_json"}

    def _post(
        self, client: httpx.Client, url: str, timeout: float, asked: tuple[int, int], **kwargs: Any
    ) -> Image.Image:
        """One try: POST, check the status, and read the first image of the reply (fetching a ``url``),
        held to the size ``asked`` for (these models answer at the size they are sent)."""
        response = client.post(url, timeout=timeout, **kwargs)
        self.check_reply(response, _error_detail(response))
        try:
            item = response.json()["data"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"{self.name}: the reply from {url} has no image in data[0]: "
                f"{self.caller.scrub(response.text)[:200]}"
            ) from exc
        if item.get("b64_json"):
            try:
                raw = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise BackendError(f"{self.name}: data[0].b64_json from {url} is not valid base64.") from exc
        elif item.get("url"):
            fetched = client.send(self._download_request(client, str(item["url"]), timeout))
            self.check_reply(fetched)
            raw = fetched.content
        else:
            raise BackendError(f"{self.name}: data[0] from {url} has neither b64_json nor url.")
        return self.reply_image(raw, f"the image returned by {url}", asked)

    def _download_request(self, client: httpx.Client, url: str, timeout: float) -> httpx.Request:
        """A GET for an image ``url``; the bearer key goes only to the API's own host, never to storage."""
        request = client.build_request("GET", url, timeout=timeout)
        if request.url.host != httpx.URL(self.base_url).host:
            request.headers.pop("Authorization", None)
        return request
