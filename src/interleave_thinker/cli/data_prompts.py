"""`interleave-thinker data prompts`: teacher-written prompts from a topic taxonomy, as a batch input."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli.options import SettingsFlags, renamed, with_settings
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.storage import check_out_folder

console = Console(stderr=True)
TaxonomyOption = Annotated[
    Path | None,
    typer.Option(
        help="YAML of domains and sub-categories \\[default: the shipped one, 8 domains, 75 sub-categories]."
    ),
]
WorkDirOption = Annotated[
    Path | None,
    typer.Option(help="Folder keeping every teacher call, for resuming \\[default: <out>.teacher]."),
]
TemperatureOption = Annotated[
    float, typer.Option(min=0.0, help="Teacher sampling temperature (retries use at least 1.0).")
]
ParseAttemptsOption = Annotated[
    int,
    typer.Option(min=1, help="Teacher calls per turn until a reply parses (as agents.max_parse_attempts)."),
]
SubcategoryConcurrencyOption = Annotated[int, typer.Option(min=1, help="Sub-categories worked on at once.")]


@with_settings()
@renamed("max_parse_attempts", ParseAttemptsOption, 3, "--max-attempts", int)
@renamed("subcategory_concurrency", SubcategoryConcurrencyOption, 8, "--concurrency", int)
def prompts(
    settings: SettingsFlags,
    out: Annotated[Path, typer.Option(help="Output JSONL, readable by `batch --input`.")],
    llm: Annotated[str, typer.Option("--llm", help="VLM spec of the teacher that writes the prompts.")],
    taxonomy: TaxonomyOption = None,
    per_subcategory: Annotated[int, typer.Option(min=1, help="Prompts per sub-category.")] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the lexicon samples shown to the teacher.")] = 0,
    subcategory_concurrency: int = 8,
    work_dir: WorkDirOption = None,
    temperature: TemperatureOption = 0.8,
    max_parse_attempts: int = 3,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Teacher reply length bound (tokens).")] = 4096,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Write prompts for every sub-category of a taxonomy with a teacher model (resumable: run it again)."""
    from interleave_thinker.agents.retry import RetryPolicy
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
    from interleave_thinker.cli.progress import counter_bar
    from interleave_thinker.datagen.prompts_run import PromptSettings, write_prompts
    from interleave_thinker.datagen.taxonomy import load_taxonomy
    from interleave_thinker.runtime.limits import BackendStats, LimitedVLM
    from interleave_thinker.runtime.outlock import folder_lock
    from interleave_thinker.runtime.scheduler import default_limit

    check_spec("--llm", llm, "vlm")
    check_out_folder(out.parent)
    tree, digest = load_taxonomy(taxonomy)
    cfg = settings.resolve()
    work = work_dir or out.with_name(out.name + ".teacher")
    retry = RetryPolicy(max_parse_attempts, temperature, 1.0)
    run_settings = PromptSettings(per_subcategory, seed, subcategory_concurrency, retry, max_new_tokens)
    info = {"taxonomy": str(taxonomy or "shipped taxonomy.yaml"), "taxonomy_sha256": digest}
    with folder_lock(work):
        with console.status(f"loading the teacher {escape(llm)}"):
            backend = load_vlm_backend(llm, BackendOptions.from_config(cfg), role="teacher")
        stats = BackendStats("teacher", default_limit(llm, cfg.remote.concurrency, False))
        teacher = LimitedVLM(backend, stats)
        progress = counter_bar(console, "sub-categories", quiet=quiet)
        with progress:
            task = progress.add_task("teacher", total=len(tree.pairs()))
            summary = write_prompts(
                tree, teacher, out, work, run_settings, info=info, on_done=lambda _: progress.advance(task)
            )
        teacher.close()
    typer.echo(
        f"wrote {summary.written} prompt(s) to {out}; near-duplicates dropped: {summary.dropped_near_duplicates}; "
        f"teacher calls: {summary.teacher_calls}, replies reused: {summary.replies_reused}"
    )
    if summary.failures or summary.short:
        console.print(
            f"[yellow]warning:[/] {len(summary.failures)} failed teacher call(s), {len(summary.short)} "
            f"sub-categor(ies) short of {per_subcategory}; details in {work / 'summary.json'}; "
            "run the same command again to ask again.",
            highlight=False,
        )
    if summary.written == 0:
        raise typer.Exit(1)
