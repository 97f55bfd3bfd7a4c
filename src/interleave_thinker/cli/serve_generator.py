"""`interleave-thinker serve generator`: an image backend behind the authors' "/edit" protocol."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Annotated

import typer


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def command(
    generator: Annotated[
        str, typer.Option(help="Image backend spec to serve, e.g. tiny:generator or diffusers:PATH_OR_ID.")
    ],
    host: Annotated[
        str, typer.Option(help="Interface to bind (127.0.0.1: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8011,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Worker processes \\[default: one per GPU, else 1]; GPUs are shared round-robin."
        ),
    ] = None,
    queue_size: Annotated[
        int, typer.Option(min=0, help="Requests that may wait for a busy worker; more get 503 + Retry-After.")
    ] = 64,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="Seconds per request, queueing included; later: 504.")
    ] = 300.0,
    api_key_env: Annotated[
        str | None, typer.Option(help="Require 'Authorization: Bearer $NAME' on /edit and /metrics.")
    ] = None,
    device: Annotated[
        Device, typer.Option(help="Where workers run; auto = CUDA when available.")
    ] = Device.auto,
    max_body_mb: Annotated[float, typer.Option(min=0.001, help="Largest request body; larger: 413.")] = 20.0,
    max_pixels: Annotated[
        int, typer.Option(min=1, help="Largest input image and output size in pixels; larger: 400.")
    ] = 4096 * 4096,
    max_prompt_chars: Annotated[
        int, typer.Option(min=1, help="Longest prompt in characters; longer: 400.")
    ] = 16_384,
    read_timeout: Annotated[
        float,
        typer.Option(
            min=0.001, help="Seconds to send the request headers, and at most between two body chunks."
        ),
    ] = 30.0,
    log_level: Annotated[
        str, typer.Option(help="debug (adds the access log), info, warning, error.")
    ] = "info",
) -> None:
    """Serve an image backend over "/edit" (POST /edit, GET /health, GET /metrics), one worker process per device.

    SIGTERM or Ctrl-C stops accepting requests, finishes the ones in flight, stops the workers and exits 0.
    """
    from interleave_thinker.server.generator import ServiceSettings, api_key_from_env, serve, worker_devices

    logging.getLogger("interleave_thinker").setLevel(log_level.upper())
    settings = ServiceSettings(
        generator=generator,
        devices=worker_devices(device.value, workers),
        host=host,
        port=port,
        queue_size=queue_size,
        timeout=timeout,
        api_key=api_key_from_env(api_key_env),
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        max_pixels=max_pixels,
        max_prompt_chars=max_prompt_chars,
        read_timeout=read_timeout,
        log_level=log_level.lower(),
    )
    if settings.api_key is None and host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(
            f"warning: binding {host} without --api-key-env: anyone who can reach it can use it.", err=True
        )
    serve(settings)
