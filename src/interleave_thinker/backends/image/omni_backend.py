"""Image backend for diffusion engines that serve the OpenAI images API with diffusion extensions.

One client drives vLLM-Omni (``vllm serve MODEL --omni``), SGLang Diffusion (``sglang serve``) and
NVIDIA Dynamo in front of either. Spec: ``vllm-omni:URL[,URL...][#MODEL]`` (``sglang-diffusion:`` is
the same client under its own name); ``URL`` is ``host:port``, ``http(s)://host:port`` or the same
with ``/v1``; ``@FILE`` reads one endpoint a line. Several endpoints form a pool with the retries,
backoff, deadline and per-endpoint cooldown of :mod:`interleave_thinker.backends.remote`.

Wire format (read from vLLM-Omni's ``entrypoints/openai/protocol/images.py`` and ``api_server.py``,
and SGLang's ``multimodal_gen/runtime/entrypoints/openai/protocol.py`` / ``image_api.py``):

- text-to-image: ``POST {base}/v1/images/generations`` JSON ``{prompt, n, size: "WxH",
  response_format: "b64_json", output_format: "png", seed, num_inference_steps, guidance_scale |
  true_cfg_scale, generator_device, [model], [negative_prompt]}``;
- edit: ``POST {base}/v1/images/edits`` multipart, the latest image as the PNG file field ``image``
  and the same settings as form fields;
- reply ``{"created", "data": [{"b64_json", "url", "revised_prompt"}], ...}``; errors as vLLM's
  ``{"error": {"message", "type", "param", "code"}}``, older ``{"object": "error", "message"}`` or
  FastAPI's ``{"detail": ...}``.

Why every setting is sent explicitly: the engines fall back to their own defaults (SGLang answers a
``url`` and seeds a CUDA generator unless told otherwise), so the request carries what our local
``diffusers`` backend would use: the model's default steps and guidance when the call leaves them
unset (guidance as ``true_cfg_scale`` for Qwen-Image-Edit, ``guidance_scale`` otherwise), the seed
on a CPU generator (``generator_device: "cpu"``, as the local backend seeds it), and a lossless PNG
reply. With the same prompt, image, size, seed, steps and guidance a served image is then the one the
local backend makes. Without ``#MODEL`` the served model's name is read once from ``/v1/models``.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
from PIL import Image

from interleave_thinker.backends.image.diffusers_backend import model_defaults as local_defaults
from interleave_thinker.backends.image.http_backend import normalize_endpoint, read_endpoints_file
from interleave_thinker.backends.image.omni_errors import check_reply
from interleave_thinker.backends.image.pooled import PooledImageBackend
from interleave_thinker.backends.remote import (
    EndpointPool,
    RemoteCaller,
    RetrySettings,
)
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""``vllm serve --api-key`` and ``sglang serve --api-key`` check a bearer token; optional here."""

MAX_REPLY_CHARS = 256 * 1024 * 1024
"""A base64 image longer than this is refused before decoding (a 4096² PNG is far below it)."""


def model_defaults(model: str) -> dict[str, Any]:
    """Steps, guidance and the request field for the guidance, exactly as the local diffusers backend
    picks them for a model name or path (its table; importing it loads no model library). vLLM-Omni
    and SGLang take ``true_cfg_scale`` for true-CFG models and ``guidance_scale`` for every other."""
    defaults = local_defaults(model)
    field = "true_cfg_scale" if defaults["guidance_arg"] == "true_cfg_scale" else "guidance_scale"
    return {"steps": defaults["steps"], "guidance": defaults["guidance"], "guidance_field": field}


def normalize_base(entry: str) -> str:
    """``host:port``, ``http://host:port`` or ``.../v1`` -> the server root, without ``/v1``."""
    return normalize_endpoint(entry).rstrip("/").removesuffix("/v1")


def parse_target(kind: str, target: str) -> tuple[list[str], str | None]:
    """``URL[,URL...][#MODEL]`` (items may be ``@FILE``) -> (server roots, model or None)."""
    endpoints_part, _, model = target.partition("#")
    urls: list[str] = []
    for item in (i.strip() for i in endpoints_part.split(",")):
        if item.startswith("@"):
            urls.extend(normalize_base(u) for u in read_endpoints_file(item[1:]))
        elif item:
            urls.append(normalize_base(item))
    if not urls:
        raise ConfigError(
            f"{kind} spec '{kind}:{target}' names no server; write {kind}:http://host:8000[#MODEL], "
            f"{kind}:host1:8000,host2:8000 or {kind}:@endpoints.txt."
        )
    return urls, model.strip() or None


def encode_png(image: Image.Image) -> bytes:
    """Lossless upload at zlib level 1: half the CPU of PIL's default level for ~15 % more bytes."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def decode_image(data: str) -> Image.Image:
    """Base64 PNG/JPEG/WebP -> loaded RGB image; ValueError when it is not one."""
    if len(data) > MAX_REPLY_CHARS:
        raise ValueError(f"{len(data)} base64 characters, over the limit of {MAX_REPLY_CHARS}")
    try:
        raw = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as opened:
            opened.load()
            return opened.convert("RGB")
    except (binascii.Error, Image.DecompressionBombError, OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc


class OmniImagesBackend(PooledImageBackend):
    """``generate`` = one ``/v1/images/generations`` or ``/v1/images/edits`` call through a pool."""

    kind = "vllm-omni"

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        model: str | None = None,
        negative_prompt: str | None = None,
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        cooldown: float = 30.0,
        api_key: str | None = None,
        key_env: str = DEFAULT_KEY_ENV,
    ) -> None:
        endpoints = [urls] if isinstance(urls, str) else list(urls)
        self.urls = [normalize_base(u) for u in endpoints]
        self.model = model
        self.negative_prompt = negative_prompt
        self.concurrency = concurrency
        self.key_env = key_env
        self.name = f"{self.kind}:" + ",".join(self.urls) + (f"#{model}" if model else "")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.pool = EndpointPool(self.urls, cooldown=cooldown)
        self.caller = RemoteCaller(
            self.name, self.pool, retry=retry, concurrency=concurrency, headers=headers
        )
        self._served: str | None = model
        self._served_lock = threading.Lock()

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OmniImagesBackend:
        """``KIND:URL[,URL...][#MODEL]``; transport settings and the key variable from ``options.remote``."""
        urls, model = parse_target(cls.kind, target)
        remote = options.remote
        key_env = remote.api_key_env or DEFAULT_KEY_ENV
        api_key = os.environ.get(key_env, "").strip() or None
        if api_key is None and remote.api_key_env:
            raise ConfigError(
                f"remote.api_key_env names {key_env}, but that environment variable is empty; "
                f"export {key_env}=<token> or unset remote.api_key_env."
            )
        return cls(
            urls,
            model=model,
            retry=RetrySettings.from_options(remote),
            concurrency=remote.concurrency,
            cooldown=remote.cooldown,
            api_key=api_key,
            key_env=key_env,
        )

    # -- the request ---------------------------------------------------------------------------

    def served_model(self) -> str:
        """``#MODEL``, else what a server lists first at ``/v1/models`` (id, root, and SGLang's
        ``pipeline_class``), read once; "" when it does not say (the fallback defaults then apply, as
        they would locally for an unknown model)."""
        with self._served_lock:
            if self._served is None:
                self._served = self.caller.call(self._read_models)
            return self._served

    def _read_models(self, client: httpx.Client, base: str, timeout: float) -> str:
        response = client.get(f"{base}/v1/models", timeout=timeout)
        if response.status_code == 404:
            return ""
        check_reply(self, response, base, "/v1/models")
        try:
            first = response.json()["data"][0]
            return " ".join(str(first.get(k) or "") for k in ("id", "root", "pipeline_class")).strip()[:500]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return ""

    def fields(
        self, prompt: str, *, width: int, height: int, seed: int, steps: int | None, guidance: float | None
    ) -> dict[str, Any]:
        """The request settings, with the served model's default steps and guidance filled in."""
        defaults = model_defaults(self.served_model())
        fields: dict[str, Any] = {
            "prompt": prompt,
            "n": 1,
            "size": f"{width}x{height}",
            "response_format": "b64_json",
            "output_format": "png",
            "seed": seed,
            "generator_device": "cpu",
            "num_inference_steps": steps if steps is not None else defaults["steps"],
            defaults["guidance_field"]: guidance if guidance is not None else defaults["guidance"],
        }
        if self.model:
            fields["model"] = self.model
        if self.negative_prompt is not None:
            fields["negative_prompt"] = self.negative_prompt
        return fields

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
        # 1. The settings our diffusers backend would use, then one request (retried by the caller).
        fields = self.fields(prompt, width=width, height=height, seed=seed, steps=steps, guidance=guidance)
        if image is None:
            path, kwargs = "/v1/images/generations", {"json": fields}
        else:
            form = {k: str(v) for k, v in fields.items()}
            files = {"image": ("image.png", encode_png(image), "image/png")}
            path, kwargs = "/v1/images/edits", {"data": form, "files": files}
        result: Image.Image = self.caller.call(
            lambda client, base, timeout: self._post(client, base, timeout, path, kwargs)
        )
        return result

    def _post(
        self, client: httpx.Client, base: str, timeout: float, path: str, kwargs: dict[str, Any]
    ) -> Image.Image:
        """One try: the status is classified by :func:`check_reply`, then the first image decoded."""
        response = client.post(f"{base}{path}", timeout=timeout, **kwargs)
        check_reply(self, response, base, path)
        try:
            data = response.json()["data"][0].get("b64_json")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendError(
                f"{self.name}: the reply of {base}{path} has no data[0].b64_json image "
                f"(start of the reply: {response.text[:160]!r})."
            ) from exc
        if not isinstance(data, str) or not data:
            raise BackendError(
                f"{self.name}: {base}{path} answered without data[0].b64_json (a URL-only reply?); "
                "this client asks for response_format=b64_json, which the server must support."
            )
        try:
            return decode_image(data)
        except ValueError as exc:
            raise BackendError(
                f"{self.name}: data[0].b64_json from {base}{path} is not an image: {exc}"
            ) from exc

    # -- batches and lifetime --------------------------------------------------------------------


class SGLangDiffusionBackend(OmniImagesBackend):
    """The same client, named ``sglang-diffusion:`` in traces (SGLang serves the same routes)."""

    kind = "sglang-diffusion"
