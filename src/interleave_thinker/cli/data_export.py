"""`interleave-thinker data export`: run folders as the release's interleaved corpora ("easy", "hard")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from interleave_thinker.cli.data import MaxPixelsOpt, writing_to
from interleave_thinker.cli.options import renamed
from interleave_thinker.cli.progress import counter_bar
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.storage import check_out_folder
from interleave_thinker.core.untrusted import MAX_IMAGE_PIXELS, ImageLimits
from interleave_thinker.datagen.export_format import DROP_REASONS, Format

SOURCE_HELP = "A run folder, a folder of runs, or a batch folder (traces in requests/<id>/)."
FORMAT_HELP = (
    "interleaved-easy: every step's kept image under the prompt that made it; "
    "interleaved-hard: every attempt, each image followed by the critic's reasoning and verdict."
)


@renamed("input", Annotated[Path | None, typer.Option(help=SOURCE_HELP)], None, "--from", Path)
def export(
    input: Path | None,
    fmt: Annotated[Format, typer.Option("--format", help=FORMAT_HELP)],
    out: Annotated[Path, typer.Option(help="Output folder (created; other exports in it are kept).")],
    no_trl: Annotated[bool, typer.Option("--no-trl", help="Skip the datasets save_to_disk copy.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    max_image_pixels: MaxPixelsOpt = MAX_IMAGE_PIXELS,
) -> None:
    """Write an interleaved corpus (ShareGPT JSON, a datasets copy, stats); exit 1 when nothing is kept."""
    from interleave_thinker.datagen.export import find_traces, read_runs, write_corpus
    from interleave_thinker.train.data.trl_format import datasets_bars

    if input is None:
        raise InputError(f"Missing option --input: {SOURCE_HELP[0].lower()}{SOURCE_HELP[1:]}")
    source = input
    check_out_folder(out)
    console = Console(stderr=True)
    runs = find_traces(source)
    progress = counter_bar(console, "reading runs", quiet=quiet)
    limits = ImageLimits(max_pixels=max_image_pixels)
    with progress:
        task = progress.add_task("runs", total=len(runs))
        kept, stats = read_runs(runs, source, fmt, lambda: progress.advance(task), limits)
    with datasets_bars(show=not quiet), writing_to(out):
        write_corpus(kept, stats, out, trl=not no_trl)
    typer.echo(f"runs: {stats.runs}, kept: {stats.kept}, images: {stats.images}")
    for reason, count in stats.dropped.items():
        typer.echo(f"dropped {count}: {DROP_REASONS[reason]}")
    typer.echo(f"wrote {out}")
    if not stats.kept:
        typer.echo(
            f"error: no trajectory of {source} could be exported as {fmt}; see the reasons above.", err=True
        )
        raise typer.Exit(1)
