"""The flags both services share (`serve generator`, `serve vlm`): one spelling, one help text each."""

from __future__ import annotations

from typing import Annotated, TypeVar

import typer

from interleave_thinker.core.errors import ConfigError

T = TypeVar("T")
MIB = 1024 * 1024
"""Bytes in a MB of the ``--max-body-mb`` flags."""

HostOption = Annotated[
    str, typer.Option(help="Interface to bind (127.0.0.1: this machine only; others expose the service).")
]
PortOption = Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")]
MaxBodyOption = Annotated[float, typer.Option(min=0.001, help="Largest request body in MB; larger: 413.")]
MaxPixelsOption = Annotated[
    int, typer.Option(min=1, help="Largest image in pixels, read from its header; larger: 400.")
]
ReadTimeoutOption = Annotated[
    float,
    typer.Option(min=0.001, help="Seconds to send the request headers, and at most between two body chunks."),
]
ApiKeyEnvOption = Annotated[
    str | None,
    typer.Option(
        help="Require 'Authorization: Bearer $NAME' on every route but /health (the key is read from the "
        "environment variable NAME: never a value on the command line). Without it, VLLM_API_KEY is read when set, as vLLM does."
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        metavar="(refused)",
        help="vLLM's flag, refused here: a key on the command line shows in ps and shell history. Export "
        "VLLM_API_KEY=<token> (read as vLLM reads it) or use --api-key-env NAME.",
    ),
]
LogLevelOption = Annotated[str, typer.Option(help="debug (adds the access log), info, warning, error.")]


def renamed(old_flag: str, old_value: T | None, new_flag: str, new_value: T | None) -> T | None:
    """The value of a flag given under its old spelling (a hidden alias) or its new one; the old one
    warns once, and both at once is an error naming them."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ConfigError(f"{old_flag} is the old spelling of {new_flag}: give only {new_flag}.")
    typer.echo(
        f"warning: {old_flag} is renamed {new_flag} (as vLLM spells it); the old name will go.", err=True
    )
    return old_value
