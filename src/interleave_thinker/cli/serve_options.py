"""The flags both services share (`serve generator`, `serve vlm`): one spelling, one help text each."""

from __future__ import annotations

from typing import Annotated

import typer

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
LogLevelOption = Annotated[str, typer.Option(help="debug (adds the access log), info, warning, error.")]
