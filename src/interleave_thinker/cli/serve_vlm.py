"""`interleave-thinker serve vlm`: an OpenAI-compatible chat server over one local VLM backend."""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

LOOPBACK_NAMES = ("localhost",)


def command(
    model: Annotated[
        str,
        typer.Option(help="VLM backend spec to serve, e.g. tiny:planner or transformers:PATH_OR_ID."),
    ],
    host: Annotated[
        str, typer.Option(help="Interface to bind; anything but loopback exposes an unauthenticated API.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    served_name: Annotated[
        str | None, typer.Option(help="Model name clients send and /v1/models lists \\[default: the spec].")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N or auto.")] = None,
    dtype: Annotated[str, typer.Option(help="auto, bfloat16, float32, ...")] = "auto",
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve a VLM backend over an OpenAI-compatible chat API (/v1/chat/completions, /v1/models, /health).

    For CPU users and tests: one model, one request at a time. The production server is vLLM (`vllm serve InterleaveThinker/InterleaveThinker-Planner-8B`); point the `openai:` backend at either, they speak the same API.
    """
    import uvicorn

    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
    from interleave_thinker.server.vlm_service import create_app

    if not _is_loopback(host):
        typer.echo(f"warning: binding {host}: this server has no authentication.", err=True)
    backend = load_vlm_backend(model, BackendOptions(device=device, dtype=dtype))
    app = create_app(backend, served_name or model)
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws="none")


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
