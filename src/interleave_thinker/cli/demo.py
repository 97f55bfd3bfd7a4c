"""``interleave-thinker demo``: serve the streaming web demo (Gradio) over one pipeline."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from interleave_thinker.cli.options import SettingsFlags, quiet_diffusers, with_settings
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.images import MAX_IMAGE_PIXELS

DEFAULT_MAX_PIXELS = MAX_IMAGE_PIXELS
"""As ``DemoOptions.max_upload_pixels`` (the ui package imports Gradio, so it is not imported here)."""
DEFAULT_MAX_PROMPT_CHARS = 4000
"""As ``DemoOptions.max_prompt_chars``."""
INSTALL_HINT = "The demo needs Gradio: pip install 'interleave-thinker[demo]' (or run `make install`)."


@with_settings(pipeline=True)
def demo(
    settings: SettingsFlags,
    host: Annotated[str, typer.Option(help="Interface to listen on (0.0.0.0 for every one).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the page.")] = 7860,
    share: Annotated[bool, typer.Option(help="Also open a public Gradio share link.")] = False,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Requests in flight at once (runs); more wait in the queue.")
    ] = 1,
    queue_size: Annotated[int, typer.Option(min=1, help="Runs that may wait in the queue.")] = 16,
    out_root: Annotated[
        Path | None,
        typer.Option(
            help="Folder of the per-session run folders, made private (0700) \\[default: <cache home>/demo]."
        ),
    ] = None,
    ttl_minutes: Annotated[
        float, typer.Option(min=1, help="Run folders and zips are deleted after this long.")
    ] = 60.0,
    max_upload_mb: Annotated[float, typer.Option(min=0.1, help="Size limit of each uploaded image.")] = 10.0,
    max_upload_pixels: Annotated[
        int, typer.Option(min=1, help="Pixels of each uploaded image, read from its header before decoding.")
    ] = DEFAULT_MAX_PIXELS,
    max_prompt_chars: Annotated[
        int, typer.Option(min=1, help="Characters of a request; longer ones are refused before the queue.")
    ] = DEFAULT_MAX_PROMPT_CHARS,
) -> None:
    """Serve the web demo: the plan, every attempt and the critic's verdicts stream into the page."""
    from interleave_thinker.backends.specs import check_specs
    from interleave_thinker.cli.progress import LoadingDisplay

    cfg = settings.resolve()
    check_specs(cfg)  # before Gradio's import: an unreachable hub is one line in seconds
    try:
        from interleave_thinker.ui import DemoOptions, build_demo, launch_kwargs
        from interleave_thinker.ui.files import own_gradio_cache
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] == "gradio":
            raise ConfigError(INSTALL_HINT) from None
        raise
    options = DemoOptions(
        ttl_s=ttl_minutes * 60,
        concurrency=concurrency,
        queue_size=queue_size,
        max_upload_mb=max_upload_mb,
        max_upload_pixels=max_upload_pixels,
        max_prompt_chars=max_prompt_chars,
    )
    if out_root is not None:
        options = dataclasses.replace(options, out_root=out_root.resolve())
    own_gradio_cache()
    with LoadingDisplay(Console(stderr=True), f"loading models ({cfg.preset or 'custom'} preset)"):
        quiet_diffusers(cfg.generator)  # imports torch and diffusers: part of the time shown
        app = build_demo(cfg, options=options)
    app.launch(server_name=host, server_port=port, share=share, **launch_kwargs(options))
