"""Image backend over the authors' "/edit" protocol: our ``serve generator`` or their own servers.

Why a client-side pool: the authors spread generator calls over a file of addresses and retry on
another one when a node fails; the same spec works here (``http:@hosts.txt``), so a fleet of
``interleave-thinker serve generator`` nodes needs no load balancer. Transport, retries, endpoint
cooldown and deadlines live in :mod:`interleave_thinker.backends.remote`; this module only speaks
"/edit": ``POST {base}/edit`` with ``{"image": base64 PNG | null, "prompt", "seed", ...knobs}``,
answered by ``{"success": true, "edited_image": base64 PNG}`` or ``{"success": false, "error"}``.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from PIL import Image

from interleave_thinker.backends.image.pooled import PooledImageBackend
from interleave_thinker.backends.remote import (
    RETRYABLE_STATUS,
    EndpointPool,
    RemoteCaller,
    RetryableError,
    RetrySettings,
    parse_retry_after,
)
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

DEFAULT_KEY_ENV = "INTERLEAVE_THINKER_GENERATOR_API_KEY"
"""Read when ``remote.api_key_env`` is not set; the token is optional (servers on a private network)."""

KNOB_PRESETS: dict[str, dict[str, Any]] = {
    "klein": {
        "num_inference_step": 4,
        "guidance_scale": 1.0,
        "width": 1024,
        "height": 1024,
        "enhance_prompt": False,
    },
    "omnigen2": {
        "num_inference_step": 50,
        "text_guidance_scale": 5.0,
        "image_guidance_scale": 1.5,
        "negative_prompt": "",
    },
    "qwen-image-edit": {"num_inference_step": 50, "guidance_scale": 5.0},
    "longcat": {"num_inference_step": 50, "guidance_scale": 4.5, "negative_prompt": ""},
}
"""The knobs the authors' clients send per generator (UPSTREAM "/edit"); ``num_inference_step`` is
singular on purpose, as in their servers."""


def normalize_endpoint(entry: str) -> str:
    """``host``, ``host:port`` or a full URL -> base URL without a trailing ``/`` or ``/edit``."""
    entry = entry.strip()
    url = entry if "://" in entry else f"http://{entry}"
    url = url.rstrip("/")
    url = url.removesuffix("/edit")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"Generator endpoint {entry!r} is not an address; write host:port or http://host:port."
        )
    try:
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"Generator endpoint {entry!r} has a bad port: {exc}.") from exc
    return url


def read_endpoints_file(path: str | Path) -> list[str]:
    """One endpoint per line; blank lines and ``#`` comments are skipped; relative to the cwd."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"Cannot read the generator endpoints file {file}: {exc.strerror or exc}. "
            "Give a file with one host:port or URL per line (http:@FILE)."
        ) from exc
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    endpoints = [normalize_endpoint(line) for line in lines if line]
    if not endpoints:
        raise ConfigError(f"The generator endpoints file {file} lists no endpoint.")
    return endpoints


def parse_target(target: str) -> tuple[list[str], str]:
    """``URL[,URL...][#KNOBS]`` or ``@FILE[#KNOBS]`` (items may mix) -> (base URLs, knob preset)."""
    endpoints_part, _, knobs = target.partition("#")
    knobs = knobs.strip().removeprefix("knobs=") or "klein"
    urls: list[str] = []
    for item in (i.strip() for i in endpoints_part.split(",")):
        if item.startswith("@"):
            urls.extend(read_endpoints_file(item[1:]))
        elif item:
            urls.append(normalize_endpoint(item))
    if not urls:
        raise ConfigError(
            f"http backend spec 'http:{target}' names no endpoint; write http:http://host:8011, "
            "http:host1:8011,host2:8011 or http:@endpoints.txt (optionally #klein, #omnigen2, ...)."
        )
    return urls, knobs


def resolve_knobs(knobs: str | Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(knobs, str):
        return dict(knobs)
    if knobs not in KNOB_PRESETS:
        raise ConfigError(f"Unknown knob preset '{knobs}'; known presets: {', '.join(KNOB_PRESETS)}.")
    return dict(KNOB_PRESETS[knobs])


def encode_png(image: Image.Image) -> str:
    buffer = io.BytesIO()
    rgb = image if image.mode in ("RGB", "RGBA", "L") else image.convert("RGB")
    rgb.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_png(data: str) -> Image.Image:
    """Base64 image -> loaded RGB image; ValueError when it is not one."""
    try:
        raw = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as opened:
            return opened.convert("RGB")
    except (binascii.Error, Image.DecompressionBombError, OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc


def _server_error(response: httpx.Response, scrub: Callable[[str], str]) -> str:
    """The ``error`` field of an "/edit" error reply, else the start of the body; scrubbed of secrets
    before it is cut, so no prefix of a key survives."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("error"):
        return scrub(str(body["error"]))[:500]
    return scrub(response.text)[:300] or "(empty body)"


class HTTPImageBackend(PooledImageBackend):
    """``generate`` = one ``POST {base}/edit`` through a pool of endpoints with retries; see the module doc."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        knobs: str | Mapping[str, Any] = "klein",
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        cooldown: float = 30.0,
        api_key: str | None = None,
    ) -> None:
        endpoints = [urls] if isinstance(urls, str) else list(urls)
        self.urls = [normalize_endpoint(u) for u in endpoints]
        self.knobs = resolve_knobs(knobs)
        self.guidance_key = "text_guidance_scale" if "text_guidance_scale" in self.knobs else "guidance_scale"
        self.concurrency = concurrency
        preset = f"#{knobs}" if isinstance(knobs, str) else "#custom"
        self.name = "http:" + ",".join(self.urls) + preset  # traces record which knobs were sent
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.pool = EndpointPool(self.urls, cooldown=cooldown)
        self.caller = RemoteCaller(
            self.name, self.pool, retry=retry, concurrency=concurrency, headers=headers
        )

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> HTTPImageBackend:
        """``http:URL[,URL...][#KNOBS]`` or ``http:@FILE[#KNOBS]``; transport from ``options.remote``."""
        urls, knobs = parse_target(target)
        remote = options.remote
        key_env = remote.api_key_env or DEFAULT_KEY_ENV
        api_key = os.environ.get(key_env, "").strip() or None
        if api_key is None and remote.api_key_env:
            raise ConfigError(
                f"remote.api_key_env names {key_env}, but that environment variable is empty; "
                f"export {key_env}=<token> or unset remote.api_key_env."
            )
        retry = RetrySettings.from_options(remote)
        return cls(
            urls,
            knobs=knobs,
            retry=retry,
            concurrency=remote.concurrency,
            cooldown=remote.cooldown,
            api_key=api_key,
        )

    def payload(
        self,
        prompt: str,
        *,
        image: Image.Image | None,
        width: int,
        height: int,
        seed: int,
        steps: int | None,
        guidance: float | None,
    ) -> dict[str, Any]:
        """The JSON body: the preset's knobs, with the call's size, steps and guidance on top."""
        knobs = {**self.knobs, "width": width, "height": height}
        if steps is not None:
            knobs["num_inference_step"] = steps
        if guidance is not None:
            knobs[self.guidance_key] = guidance
        return {
            "image": encode_png(image) if image is not None else None,
            "prompt": prompt,
            "seed": seed,
            **knobs,
        }

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
        body = self.payload(
            prompt, image=image, width=width, height=height, seed=seed, steps=steps, guidance=guidance
        )
        result: Image.Image = self.caller.call(
            lambda client, base, timeout: self._post(client, base, timeout, body)
        )
        return result

    def _post(self, client: httpx.Client, base: str, timeout: float, body: dict[str, Any]) -> Image.Image:
        """One try: retryable failures raise :class:`RetryableError`, others :class:`BackendError`."""
        response = client.post(f"{base}/edit", json=body, timeout=timeout)
        scrub = self.caller.scrub
        if response.status_code in RETRYABLE_STATUS:
            raise RetryableError(
                f"HTTP {response.status_code}: {_server_error(response, scrub)}", parse_retry_after(response)
            )
        if response.status_code >= 400:
            raise BackendError(
                f"{self.name}: HTTP {response.status_code} from {base}/edit: {_server_error(response, scrub)}"
            )
        try:
            reply = response.json()
        except ValueError:
            raise RetryableError(f"reply is not JSON: {scrub(response.text)[:120]!r}") from None
        if not isinstance(reply, dict):
            raise RetryableError(f"reply is not a JSON object: {scrub(response.text)[:120]!r}")
        if reply.get("success") is not True:
            error = scrub(str(reply.get("error") or "success is not true"))[:500]
            raise RetryableError(f"server error: {error}")
        edited = reply.get("edited_image")
        if not isinstance(edited, str):
            raise RetryableError("reply has no 'edited_image' string")
        try:
            return decode_png(edited)
        except ValueError as exc:
            raise RetryableError(f"'edited_image' is not a base64 image ({exc})") from None
