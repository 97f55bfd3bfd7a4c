"""`interleave-thinker serve generator`: an image backend behind the authors' "/edit" protocol."""

from __future__ import annotations

import logging
import re
from typing import Annotated

import typer

from interleave_thinker.cli import serve_options as shared
from interleave_thinker.cli.options import SettingsFlags, field_defaults, with_settings
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.server.generator.settings import ServiceSettings

SERVICE = field_defaults(ServiceSettings)
"""The flags' defaults: the fields' of the service's settings (one source)."""


@with_settings()
def command(
    settings: SettingsFlags,
    generator: Annotated[
        str | None,
        typer.Option(
            help="Image backend spec to serve, e.g. tiny:generator or diffusers:PATH_OR_ID "
            "\\[default: the settings' generator]."
        ),
    ] = None,
    host: shared.HostOption = SERVICE["host"],
    port: shared.PortOption = SERVICE["port"],
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Worker processes \\[default: one per GPU, else 1]; GPUs are shared round-robin."
        ),
    ] = None,
    queue_size: Annotated[
        int, typer.Option(min=0, help="Requests that may wait for a busy worker; more get 503 + Retry-After.")
    ] = SERVICE["queue_size"],
    timeout: Annotated[
        float, typer.Option(min=0.001, help="Seconds per request, queueing included; later: 504.")
    ] = SERVICE["timeout"],
    api_key_env: shared.ApiKeyEnvOption = None,
    api_key: shared.ApiKeyOption = None,
    max_body_mb: shared.MaxBodyOption = SERVICE["max_body_bytes"] / shared.MIB,
    max_pixels: shared.MaxPixelsOption = SERVICE["max_pixels"],
    max_prompt_chars: Annotated[
        int, typer.Option(min=1, help="Longest prompt in characters; longer: 400.")
    ] = SERVICE["max_prompt_chars"],
    read_timeout: shared.ReadTimeoutOption = SERVICE["read_timeout"],
    log_level: shared.LogLevelOption = SERVICE["log_level"],
) -> None:
    """Serve an image backend over "/edit" and OpenAI's images API (POST /edit, /v1/images/generations, /v1/images/edits; GET /v1/models, /health, /metrics, /metrics.json), one worker process per device.
    SIGTERM or Ctrl-C stops accepting requests, finishes the ones in flight, stops the workers and exits 0."""
    cfg = _settings(settings, generator)
    from interleave_thinker.server.generator import api_key_from_env, serve

    logging.getLogger("interleave_thinker").setLevel(log_level.upper())
    service = ServiceSettings(
        generator=cfg.generator,
        devices=_devices(cfg.model.device, workers),
        dtype=cfg.model.dtype,
        host=host,
        port=port,
        queue_size=queue_size,
        timeout=timeout,
        api_key=api_key_from_env(api_key_env, refused_value=api_key),
        max_body_bytes=int(max_body_mb * shared.MIB),
        max_pixels=max_pixels,
        max_prompt_chars=max_prompt_chars,
        read_timeout=read_timeout,
        log_level=log_level.lower(),
    )
    if service.api_key is None and host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(
            f"warning: binding {host} without a key (--api-key-env or VLLM_API_KEY): anyone who can reach it can use it.",
            err=True,
        )
    serve(service)


def _settings(settings: SettingsFlags, generator: str | None) -> PipelineConfig:
    """The settings, the spec to serve checked first: ``--generator``, else the settings' generator."""
    if generator is not None:
        check_spec("--generator", generator, "image")
    cfg = settings.resolve(generator=generator)
    if generator is None:
        check_spec("config key 'generator'", cfg.generator, "image")
    return cfg


def _devices(device: str | None, workers: int | None) -> tuple[str, ...]:
    """Worker devices from ``model.device``: one named GPU for every worker, else spread (auto/cpu/cuda)."""
    from interleave_thinker.server.generator import worker_devices

    if device is not None and re.fullmatch(r"cuda:\d+", device):
        return (device,) * (workers or 1)
    return worker_devices(device or "auto", workers)
