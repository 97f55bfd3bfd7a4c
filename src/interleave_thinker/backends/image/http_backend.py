"""Image backend over the authors' "/edit" protocol: our ``serve generator`` or their own servers.

Why a client-side pool: the authors spread generator calls over a file of addresses and retry on
another one when a node fails; the same spec works here (``http:@hosts.txt``), so a fleet of
``interleave-thinker serve generator`` nodes needs no load balancer. Transport, retries, endpoint
cooldown and deadlines live in :mod:`interleave_thinker.backends.remote`; this module only speaks
"/edit": ``POST {base}/edit`` with ``{"image": base64 PNG | null, "prompt", "seed", ...knobs}``,
answered by ``{"success": true, "edited_image": base64 PNG}`` or ``{"success": false, "error"}``.
With reference images, ``image`` is a list instead: the edited image first, then the references in
order (``serve generator`` reads it; the authors' servers read one image only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack
from urllib.parse import urlsplit

import httpx
from PIL import Image

from interleave_thinker.backends.encoding import ImageTooLarge, decode_base64_image, png_base64
from interleave_thinker.backends.image.pooled import PooledImageBackend, PoolKeywords, endpoint_list
from interleave_thinker.backends.model_defaults import KNOB_PRESETS, preset_knobs
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.references import WIRE_MAX_REFERENCES, check_request, wire_images
from interleave_thinker.backends.remote import RetryableError
from interleave_thinker.backends.remote_backend import pool_settings
from interleave_thinker.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

__all__ = [
    "KNOB_PRESETS",
    "HTTPImageBackend",
    "normalize_endpoint",
    "parse_target",
    "pool_items",
    "read_pool_file",
]

DEFAULT_KEY_ENV = "INTERLEAVE_THINKER_GENERATOR_API_KEY"
"""Read when ``remote.api_key_env`` is not set; the token is optional (servers on a private network)."""


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
        raise ConfigError(
            f"Generator endpoint {entry!r} has a bad port: {exc}; write HOST:PORT with a port from 1 to 65535."
        ) from exc
    return url


def read_pool_file(path: str | Path) -> list[tuple[str, int | None]]:
    """One endpoint per line, optionally followed by ``slots=N`` (calls in flight at most on that
    endpoint); blank lines and ``#`` comments are skipped; relative to the cwd. Entries come back as
    written: each backend normalises its own URLs."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"Cannot read the generator endpoints file {file}: {exc.strerror or exc}. "
            "Give a file with one host:port or URL per line (http:@FILE)."
        ) from exc
    entries: list[tuple[str, int | None]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        options = dict(w.partition("=")[::2] for w in words[1:])
        value = options.pop("slots", None)
        if options or (value is not None and not (value.isdigit() and int(value) >= 1)):
            raise ConfigError(
                f"{file}, line {number}: {raw.strip()!r}: write 'host:port' or 'host:port slots=N' "
                "(N >= 1, the calls in flight at most on that endpoint)."
            )
        entries.append((words[0], int(value) if value is not None else None))
    if not entries:
        raise ConfigError(f"The generator endpoints file {file} lists no endpoint.")
    return entries


def pool_items(endpoints_part: str, normalize: Callable[[str], str]) -> tuple[list[str], dict[str, int]]:
    """A spec's comma-separated endpoints (items may be ``@FILE``) -> (normalised URLs, slots per URL
    from the files' ``slots=N``)."""
    urls: list[str] = []
    slots: dict[str, int] = {}
    for item in (i.strip() for i in endpoints_part.split(",")):
        if item.startswith("@"):
            for entry, n in read_pool_file(item[1:]):
                urls.append(normalize(entry))
                if n is not None:
                    slots[urls[-1]] = n
        elif item:
            urls.append(normalize(item))
    return urls, slots


def parse_target(target: str) -> tuple[list[str], str, dict[str, int]]:
    """``URL[,URL...][#KNOBS]`` or ``@FILE[#KNOBS]`` (items may mix) -> (base URLs, knob preset, slots
    per URL)."""
    endpoints_part, _, knobs = target.partition("#")
    knobs = knobs.strip().removeprefix("knobs=") or "klein"
    urls, slots = pool_items(endpoints_part, normalize_endpoint)
    if not urls:
        raise ConfigError(
            f"http backend spec 'http:{target}' names no endpoint; write http:http://host:8011, "
            "http:host1:8011,host2:8011 or http:@endpoints.txt (optionally #klein, #omnigen2, ...)."
        )
    return urls, knobs, slots


def resolve_knobs(knobs: str | Mapping[str, Any]) -> dict[str, Any]:
    """A preset name (``klein``...; its knobs come from ``backends.model_defaults``) or explicit knobs."""
    return preset_knobs(knobs) if isinstance(knobs, str) else dict(knobs)


class HTTPImageBackend(PooledImageBackend):
    """``generate`` = one ``POST {base}/edit`` through a pool of endpoints with retries; see the module doc."""

    max_references = WIRE_MAX_REFERENCES
    """What ``serve generator`` takes at its boundary; it refuses (400) more than its own backend takes."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        knobs: str | Mapping[str, Any] = "klein",
        **transport: Unpack[PoolKeywords],
    ) -> None:
        self.urls = endpoint_list(urls, normalize_endpoint)
        self.knobs = resolve_knobs(knobs)
        self.guidance_key = "text_guidance_scale" if "text_guidance_scale" in self.knobs else "guidance_scale"
        preset = f"#{knobs}" if isinstance(knobs, str) else "#custom"
        self.name = "http:" + ",".join(self.urls) + preset  # traces record which knobs were sent
        self.open_pool(DEFAULT_KEY_ENV, transport)

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> HTTPImageBackend:
        """``http:URL[,URL...][#KNOBS]`` or ``http:@FILE[#KNOBS]``; transport from ``options.remote``."""
        urls, knobs, slots = parse_target(target)
        settings = pool_settings(options.remote, f"http:{target}", DEFAULT_KEY_ENV)
        return cls(urls, knobs=knobs, slots=slots, **settings)

    def payload(self, request: ImageRequest) -> dict[str, Any]:
        """The JSON body: the preset's knobs, with the call's size, steps and guidance on top."""
        knobs = {**self.knobs, "width": request.width, "height": request.height}
        if request.steps is not None:
            knobs["num_inference_step"] = request.steps
        if request.guidance is not None:
            knobs[self.guidance_key] = request.guidance
        image: str | list[str] | None = None
        if request.references:
            image = [png_base64(i, keep_mode=True) for i in wire_images(request)]
        elif request.image is not None:
            image = png_base64(request.image, keep_mode=True)
        return {"image": image, "prompt": request.prompt, "seed": request.seed, **knobs}

    def generate(self, request: ImageRequest) -> Image.Image:
        check_request(self.name, self.max_references, request)
        body = self.payload(request)
        result: Image.Image = self.caller.call(
            lambda client, base, timeout: self._post(client, base, timeout, body, request)
        )
        return result

    def _post(
        self, client: httpx.Client, base: str, timeout: float, body: dict[str, Any], asked: ImageRequest
    ) -> Image.Image:
        """One try: retryable failures raise :class:`RetryableError`, others :class:`BackendError`; the
        image is held to the size ``asked`` for (the server generates at the width and height sent)."""
        response = client.post(f"{base}/edit", json=body, timeout=timeout)
        scrub = self.caller.scrub
        self.check_reply(response)
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
        max_pixels, size = self.caller.retry.max_image_pixels, (asked.width, asked.height)
        try:
            return decode_base64_image(edited, max_pixels=max_pixels, asked=size)
        except ImageTooLarge as exc:
            raise BackendError(f"{self.name}: 'edited_image' from {base}/edit: {exc}.") from None
        except ValueError as exc:
            raise RetryableError(f"'edited_image' is not a base64 image ({exc})") from None
