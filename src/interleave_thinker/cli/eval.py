"""`interleave-thinker eval`: generate benchmark outputs in the official layouts, score them, compare runs.

The benchmark choices come from the registry (:mod:`interleave_thinker.eval.benchmarks`), never from a
list here: a new benchmark module appears in every command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli import eval_calibrate, eval_generate, eval_run, eval_score
from interleave_thinker.core.errors import TemplateError
from interleave_thinker.core.storage import check_out_folder
from interleave_thinker.eval import benchmarks

app = typer.Typer(
    help="Benchmarks: generate outputs in the official layouts, score them, compare runs.",
    no_args_is_help=True,
)
prompts_app = typer.Typer(help="The benchmarks' official judge prompts (fetched at run time, never shipped).")
app.command("generate")(eval_generate.generate)
app.command("score")(eval_score.score)
app.command("run")(eval_run.run)
app.add_typer(prompts_app, name="prompts")
app.add_typer(eval_calibrate.app, name="calibrate")
console = Console(stderr=True)


@app.command("report")
def report(
    dirs: Annotated[
        list[Path], typer.Argument(help="Scoring folders of `eval score` (first = the reference run).")
    ],
    out: Annotated[Path, typer.Option(help="The HTML page to write.")],
) -> None:
    """Scored runs side by side (per category and overall), published numbers, paired galleries; a
    Markdown table on stdout."""
    from interleave_thinker.eval.report import write_report

    check_out_folder(out.parent)
    typer.echo(write_report(list(dirs), out))
    console.print(escape(f"wrote {out}"))


@prompts_app.command("download")
def prompts_download(
    protocols: Annotated[
        list[eval_score.ProtocolName] | None,
        typer.Argument(help="The protocols whose judge prompts to fetch (default: all)."),
    ] = None,
) -> None:
    """Fetch the judge prompts at their pinned commits, check their SHA-256 and cache them, so scoring
    works offline afterwards (or copy the cache folder to an offline machine)."""
    chosen = (
        [benchmarks.find_protocol(p.value)[1] for p in protocols] if protocols else benchmarks.protocols()
    )
    from interleave_thinker.eval.prompts import FOLDER_ENV, EvalPromptStore, JudgePromptsUnavailable

    for protocol in chosen:
        try:
            prompts = protocol.prompts()
        except JudgePromptsUnavailable as exc:  # advice for this command, not "run this command"
            raise TemplateError(
                f"{exc.reason}. This machine cannot fetch them: run this command where github.com is "
                f"reachable and copy its cache folder {EvalPromptStore().cache_dir} to the same path here, "
                f"or set {FOLDER_ENV} to a folder of <name>.txt files."
            ) from None
        typer.echo(f"{protocol.name}: {len(prompts.texts)} prompts, {prompts.origin}")
