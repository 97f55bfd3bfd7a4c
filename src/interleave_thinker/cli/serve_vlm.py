"""`interleave-thinker serve vlm` (placeholder, implemented with the OpenAI-compatible server)."""

from __future__ import annotations

import typer


def command() -> None:
    """Serve a VLM backend over an OpenAI-compatible chat API."""
    raise typer.Exit(1)
