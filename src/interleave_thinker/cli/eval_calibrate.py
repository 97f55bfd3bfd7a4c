"""`interleave-thinker eval calibrate`: how often a judge agrees with people, on a published label set.

``eval calibrate opening --data DIR --out OUT`` (pairwise verdicts, OpenING's four agreement rules) and
``eval calibrate viescore --data DIR --out OUT`` (scalar ratings, Spearman and Kendall per task with
bootstrap intervals and the human ceiling) print the table and write ``OUT/calibration.json`` and
``OUT/calibration.html``; ``eval calibrate download SET --to DIR`` fetches a set at its pinned commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.core.errors import ConfigError

app = typer.Typer(
    help="Judges against people: agreement and correlation on published human-label sets.",
    no_args_is_help=True,
)
console = Console(stderr=True)
DataOption = Annotated[
    Path, typer.Option(help="The label set's folder (as `eval calibrate download` writes it).")
]
OutOption = Annotated[Path, typer.Option(help="Folder for calibration.json and calibration.html.")]


def _finish(result: dict[str, Any], out: Path, printed: list[str]) -> None:
    from interleave_thinker.eval.calibration import report

    record = report.write(result, out)
    typer.echo("\n".join(printed))
    pinned = record["data_files"]
    if not pinned["pinned"]:
        console.print(
            escape(
                f"note: {pinned['present']} of {pinned['pinned_files']} pinned files present, changed: "
                f"{pinned['changed'] or 'none'}; figures are from these files, not the pinned release."
            )
        )
    console.print(escape(f"wrote {out / report.JSON_FILE} and {out / report.PAGE_FILE}"))


def _extra_judges(values: list[str] | None) -> dict[str, Path]:
    judges: dict[str, Path] = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"--judge {value!r}: write NAME=FILE (a verdicts JSON in OpenING's format).")
        judges[name.strip()] = Path(path.strip())
    return judges


@app.command("opening")
def calibrate_opening(
    data: DataOption,
    out: OutOption,
    judge: Annotated[
        list[str] | None,
        typer.Option(help="Another judge's verdicts on the same pairs, NAME=FILE (repeatable)."),
    ] = None,
) -> None:
    """Agreement with OpenING's 4,302 human verdicts under force-dividing ties, without ties, ties as 0
    and ties as 0.5, for GPT-4o, IntJudge and any judge given."""
    from interleave_thinker.eval.calibration import labels, opening

    result = opening.calibrate(data, _extra_judges(judge))
    result["data_files"] = labels.check_folder(labels.find("opening"), data)
    _finish(result, out, opening.lines(result))


@app.command("viescore")
def calibrate_viescore(
    data: DataOption,
    out: OutOption,
    judge: Annotated[
        str, typer.Option(help="The answers folder under _answers/ (the judge and its setting).")
    ] = "results_gpt4o_0shot",
    resamples: Annotated[int, typer.Option(min=0, help="Bootstrap resamples per interval (0: none).")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
) -> None:
    """Spearman and Kendall per ImagenHub task between human SC/PQ/O and the judge's stored answers
    (read by our VIEScore parser), with bootstrap intervals and the raters' agreement as the ceiling."""
    from interleave_thinker.eval.calibration import labels, viescore

    result = viescore.calibrate(data, judge, resamples, seed)
    result["data_files"] = labels.check_folder(labels.find("viescore"), data)
    _finish(result, out, viescore.lines(result))


@app.command("download")
def download(
    name: Annotated[str, typer.Argument(help="The label set: opening or viescore.")],
    to: Annotated[Path, typer.Option(help="The folder to write the set into (then pass it as --data).")],
) -> None:
    """Fetch a label set at its pinned commit, check every file's SHA-256, write it under --to."""
    from interleave_thinker.eval.calibration import labels

    label_set = labels.find(name)
    written = labels.download(label_set, to, on_file=lambda rel: console.print(escape(f"fetched {rel}")))
    kept = len(label_set.files) - len(written)
    typer.echo(
        f"{label_set.name}: {len(written)} files downloaded and verified, {kept} already present "
        f"({label_set.repo}@{label_set.commit[:12]}), in {to}"
    )


@app.command("drift")
def drift(
    out: Annotated[Path, typer.Option(help="Folder for the suite (OUT/suite), its scores and drift.json.")],
    scorer: Annotated[
        str, typer.Option(help="The offline consistency scorer to measure (perceptual).")
    ] = "perceptual",
    scores: Annotated[
        Path | None,
        typer.Option(
            help="Measure these scores of OUT/suite instead (any scorer's, e.g. the VLM's: "
            "`eval score consistency --outputs OUT/suite --judge SPEC`)."
        ),
    ] = None,
    dev: Annotated[bool, typer.Option(help="The development seeds (where settings are chosen).")] = False,
) -> None:
    """The drift suite: sequences made here with an identity, colour, style or scene swap at a known step
    (and unbroken twins); a scorer's AUROC (broken or not) and localisation (which step), per kind."""
    import json

    from interleave_thinker.core.paths import write_atomic
    from interleave_thinker.eval import consistency_scorers
    from interleave_thinker.eval.calibration import drift as suite

    spec = suite.DEV_SUITE if dev else suite.SUITE
    folder = out / "suite"
    if not (folder / suite.TRUTH_FILE).is_file():
        suite.write_suite(folder, spec)
    if scores is None:
        scores = folder / f"scores-consistency-{scorer}"
        offline = consistency_scorers.offline_scorer(scorer)
        consistency_scorers.score_runs(folder, scores, offline)
        provenance = offline.provenance()
    else:
        provenance = {"scores": str(scores)}
    result = {**suite.measure_scored(folder, scores), "scorer": provenance}
    write_atomic(out / "drift.json", json.dumps(result, indent=2) + "\n")
    typer.echo(
        f"drift suite (seed {result['suite']['seed']}, {result['suite']['per_kind']} broken + twins per kind)"
    )
    for kind, entry in result["kinds"].items():
        typer.echo(
            f"  {kind:<9} AUROC {entry['auroc']}  localisation {entry['localisation']}  "
            f"({entry.get('broken', 0)} broken, {entry.get('unbroken', 0)} unbroken, {entry['unscored']} unscored)"
        )
    console.print(escape(f"wrote {out / 'drift.json'}"))
