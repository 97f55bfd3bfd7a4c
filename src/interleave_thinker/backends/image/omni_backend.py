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
  and the same settings as form fields; reference images follow it as further ``image`` parts, in
  order (vLLM-Omni's route takes ``image: list[UploadFile]`` and hands the list to the pipeline, the
  first image setting an ``auto`` size);
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

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Unpack

import httpx
from PIL import Image

from interleave_thinker.backends.encoding import png_bytes
from interleave_thinker.backends.image.http_backend import normalize_endpoint, pool_items
from interleave_thinker.backends.image.omni_errors import advice
from interleave_thinker.backends.image.pooled import PooledImageBackend, PoolKeywords, endpoint_list
from interleave_thinker.backends.model_defaults import find_defaults, model_defaults
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.references import (
    WIRE_MAX_REFERENCES,
    check_request,
    file_name,
    model_reference_cap,
    wire_images,
)
from interleave_thinker.backends.remote_backend import pool_settings
from interleave_thinker.core import green
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

logger = logging.getLogger(__name__)
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""``vllm serve --api-key`` and ``sglang serve --api-key`` check a bearer token; optional here."""


def served_defaults(model: str) -> tuple[int, float, str]:
    """Steps, guidance and the request field for the guidance, exactly as the local diffusers backend
    picks them for a model name or path (the one table in ``backends.model_defaults``). vLLM-Omni and
    SGLang take ``true_cfg_scale`` for true-CFG models and ``guidance_scale`` for every other."""
    defaults = model_defaults(model)
    field = "true_cfg_scale" if defaults.guidance_arg == "true_cfg_scale" else "guidance_scale"
    return defaults.steps, defaults.guidance, field


def normalize_base(entry: str) -> str:
    """``host:port``, ``http://host:port`` or ``.../v1`` -> the server root, without ``/v1``."""
    return normalize_endpoint(entry).rstrip("/").removesuffix("/v1")


def parse_target(kind: str, target: str) -> tuple[list[str], str | None, dict[str, int]]:
    """``URL[,URL...][#MODEL]`` (items may be ``@FILE``) -> (server roots, model or None, slots per root
    from the files' ``slots=N``)."""
    endpoints_part, _, model = target.partition("#")
    urls, slots = pool_items(endpoints_part, normalize_base)
    if not urls:
        raise ConfigError(
            f"{kind} spec '{kind}:{target}' names no server; write {kind}:http://host:8000[#MODEL], "
            f"{kind}:host1:8000,host2:8000 or {kind}:@endpoints.txt."
        )
    return urls, model.strip() or None, slots


class OmniImagesBackend(PooledImageBackend):
    """``generate`` = one ``/v1/images/generations`` or ``/v1/images/edits`` call through a pool."""

    kind = "vllm-omni"

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        model: str | None = None,
        negative_prompt: str | None = None,
        **transport: Unpack[PoolKeywords],
    ) -> None:
        self.urls = endpoint_list(urls, normalize_base)
        self.model = model
        # A #MODEL we know takes what the local backend takes; another, the wire's cap (the server
        # refuses what its model cannot take).
        cap = model_reference_cap(model or "")
        self.max_references = WIRE_MAX_REFERENCES if cap is None else cap
        self.negative_prompt = negative_prompt
        self.name = f"{self.kind}:" + ",".join(self.urls) + (f"#{model}" if model else "")
        self.open_pool(DEFAULT_KEY_ENV, transport)
        self._served: str | None = model
        self._served_lock = green.Lock()  # held across the /v1/models call: may suspend in a batch

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OmniImagesBackend:
        """``KIND:URL[,URL...][#MODEL]``; transport settings and the key variable from ``options.remote``."""
        urls, model, slots = parse_target(cls.kind, target)
        settings = pool_settings(options.remote, f"{cls.kind}:{target}", DEFAULT_KEY_ENV)
        return cls(urls, model=model, slots=slots, **settings)

    # -- the request ---------------------------------------------------------------------------

    def served_model(self) -> str:
        """``#MODEL``, else what a server lists first at ``/v1/models`` (id, root, and SGLang's
        ``pipeline_class``), read once; "" when it does not say (the fallback defaults then apply, as
        they would locally for an unknown model, said once at warning level)."""
        with self._served_lock:
            if self._served is None:
                self._served = self.caller.call(self._read_models)
                if find_defaults(self._served) is None:
                    fallback = model_defaults("")
                    logger.warning(
                        "%s: the served model %s is not in the model-defaults table; requests without "
                        "generation.steps / generation.guidance use %d steps and guidance %s. Set them, or "
                        "name the model with #MODEL in the spec.",
                        self.name,
                        repr(self._served) if self._served else "(unnamed at /v1/models)",
                        fallback.steps,
                        fallback.guidance,
                    )
            return self._served

    def _read_models(self, client: httpx.Client, base: str, timeout: float) -> str:
        response = client.get(f"{base}/v1/models", timeout=timeout)
        if response.status_code == 404:
            return ""
        self.check_reply(response)
        try:
            first = response.json()["data"][0]
            return " ".join(str(first.get(k) or "") for k in ("id", "root", "pipeline_class")).strip()[:500]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return ""

    def fields(self, request: ImageRequest) -> dict[str, Any]:
        """The request settings, with the served model's default steps and guidance filled in."""
        steps, guidance, guidance_field = served_defaults(self.served_model())
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "n": 1,
            "size": f"{request.width}x{request.height}",
            "response_format": "b64_json",
            "output_format": "png",
            "seed": request.seed,
            "generator_device": "cpu",
            "num_inference_steps": request.steps if request.steps is not None else steps,
            guidance_field: request.guidance if request.guidance is not None else guidance,
        }
        if self.model:
            fields["model"] = self.model
        if self.negative_prompt is not None:
            fields["negative_prompt"] = self.negative_prompt
        return fields

    def generate(self, request: ImageRequest) -> Image.Image:
        # 1. The settings our diffusers backend would use, then one request (retried by the caller).
        check_request(self.name, self.max_references, request)
        fields = self.fields(request)
        images = wire_images(request)  # the edited image, then the references, as repeated parts
        kwargs: dict[str, Any]
        if not images:
            path, kwargs = "/v1/images/generations", {"json": fields}
        else:
            form = {k: str(v) for k, v in fields.items()}
            files = [
                ("image", (file_name(i), png_bytes(image, compress_level=1), "image/png"))
                for i, image in enumerate(images)
            ]
            path, kwargs = "/v1/images/edits", {"data": form, "files": files}
        result: Image.Image = self.caller.call(
            lambda client, base, timeout: self._post(client, base, timeout, path, kwargs, request)
        )
        return result

    def status_hint(self, status: int, detail: str, path: str = "") -> str:
        return advice(self.key_envs[0], self.model, status, detail, path)

    def _post(
        self,
        client: httpx.Client,
        base: str,
        timeout: float,
        path: str,
        kwargs: dict[str, Any],
        asked: ImageRequest,
    ) -> Image.Image:
        """One try: the status is classified by :meth:`check_reply`, then the first image decoded, held
        to the size ``asked`` for (these engines honour ``size``)."""
        response = client.post(f"{base}{path}", timeout=timeout, **kwargs)
        self.check_reply(response)
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
        return self.reply_image(data, f"data[0].b64_json from {base}{path}", (asked.width, asked.height))


class SGLangDiffusionBackend(OmniImagesBackend):
    """The same client, named ``sglang-diffusion:`` in traces (SGLang serves the same routes)."""

    kind = "sglang-diffusion"
