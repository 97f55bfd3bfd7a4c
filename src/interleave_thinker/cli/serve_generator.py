"""`interleave-thinker serve generator` (placeholder, implemented with the generator service)."""

from __future__ import annotations

import typer


def command() -> None:
    """Serve an image backend over the "/edit" protocol."""
    raise typer.Exit(1)
