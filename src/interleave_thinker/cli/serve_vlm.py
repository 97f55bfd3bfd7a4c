"""`interleave-thinker serve vlm`: an OpenAI-compatible chat server over one local VLM backend."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Annotated, Any

import typer

from interleave_thinker.cli import serve_options as shared
from interleave_thinker.cli.options import DtypeOption, SettingsFlags, with_settings
from interleave_thinker.cli.serve_options import renamed
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.server.settings import HOST, LOG_LEVEL, READ_TIMEOUT, VLM_PORT, VLMLimits

LIMITS = VLMLimits()
"""The defaults of the request-bound flags: the service's own (one source)."""


def limit_option(name: str, minimum: int) -> Any:
    """The flag of :class:`VLMLimits`'s field ``name``: its help is the field's."""
    help_text = next(f.metadata["help"] for f in dataclasses.fields(VLMLimits) if f.name == name)
    return typer.Option(min=minimum, help=help_text)


LOOPBACK_NAMES = ("localhost",)
SHUTDOWN_GRACE_S = 3
"""On SIGTERM, requests in flight get this long; then their generations are stopped at the next token."""


ServedModelNameOption = Annotated[
    str | None,
    typer.Option(help="Model name clients send and /v1/models lists, as vLLM's flag \\[default: the spec]."),
]


@with_settings()
def command(
    settings: SettingsFlags,
    model: Annotated[
        str,
        typer.Option(help="VLM backend spec to serve, e.g. tiny:planner or transformers:PATH_OR_ID."),
    ],
    host: shared.HostOption = HOST,
    port: shared.PortOption = VLM_PORT,
    served_model_name: ServedModelNameOption = None,
    served_name: Annotated[str | None, typer.Option("--served-name", hidden=True)] = None,
    dtype: DtypeOption = None,
    api_key_env: shared.ApiKeyEnvOption = None,
    api_key: shared.ApiKeyOption = None,
    max_tokens: Annotated[int, limit_option("max_tokens", 1)] = LIMITS.max_tokens,
    max_body_mb: shared.MaxBodyOption = LIMITS.max_body_bytes / shared.MIB,
    max_pixels: shared.MaxPixelsOption = LIMITS.max_pixels,
    max_images: Annotated[int, limit_option("max_images", 0)] = LIMITS.max_images,
    max_waiting: Annotated[int, limit_option("max_waiting", 0)] = LIMITS.max_waiting,
    read_timeout: shared.ReadTimeoutOption = READ_TIMEOUT,
    log_level: shared.LogLevelOption = LOG_LEVEL,
) -> None:
    """Serve a VLM backend over an OpenAI-compatible chat API (/v1/chat/completions, stream=true included; /v1/models, /health, /metrics).

    For CPU users and tests: one model, one request at a time; a request whose client disconnects is stopped at its next token, and SIGTERM stops within a few seconds. The production server is vLLM (`vllm serve InterleaveThinker/InterleaveThinker-Planner-8B`); point the `openai:` backend at either, they speak the same API.
    """
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
    from interleave_thinker.server.auth import api_key_from_env
    from interleave_thinker.server.vlm_service import create_app

    check_spec("--model", model, "vlm")
    served_model_name = renamed("--served-name", served_name, "--served-model-name", served_model_name)
    cfg = settings.resolve(dtype=dtype)
    key = api_key_from_env(api_key_env, refused_value=api_key)
    _warn_without_key(host, key)
    backend = load_vlm_backend(model, BackendOptions.from_config(cfg))
    limits = VLMLimits(
        max_tokens=max_tokens,
        max_body_bytes=int(max_body_mb * shared.MIB),
        max_pixels=max_pixels,
        max_images=max_images,
        max_waiting=max_waiting,
    )
    app = create_app(backend, served_model_name or model, limits, key)
    run_server(app, host=host, port=port, log_level=log_level, read_timeout=read_timeout, api_key=key)


def run_server(
    app: Any, *, host: str, port: int, log_level: str, read_timeout: float, api_key: str | None
) -> None:
    """Serve ``app`` under uvicorn until SIGTERM or SIGINT (exit 0), its log lines cleaned of secrets."""
    import uvicorn

    from interleave_thinker.server.generator.run import signals_end_cleanly
    from interleave_thinker.server.limits import read_timeout_protocol
    from interleave_thinker.server.logs import redact_logs

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level in ("debug", "trace"),  # as serve generator: request lines at debug and below
        ws="none",
        http=read_timeout_protocol(read_timeout),
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    redact_logs(api_key)  # after uvicorn.Config, which sets up the log handlers
    with signals_end_cleanly():  # SIGTERM is a clean stop (exit 0), not a crash
        uvicorn.Server(config).run()


def _warn_without_key(host: str, key: str | None) -> None:
    if key is None and not _is_loopback(host):
        typer.echo(
            f"warning: binding {host} without a key (--api-key-env or VLLM_API_KEY): anyone who can reach it can use it.",
            err=True,
        )


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
