"""What `data build` and `data stats` print: the runs left out, the judge pass, the counts, and the exit
when nothing useful was made."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

MAX_ERRORS = 20
"""At most this many problems or left-out runs are listed; the rest are counted."""


@dataclasses.dataclass
class JudgePass:
    """What the judge pass did: how many attempts it was asked to score, and its errors."""

    asked: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def all_failed(self) -> bool:
        return self.asked > 0 and len(self.errors) == self.asked


def report_failed(failed: list[dict[str, str]]) -> None:
    """Each run or record left out, with its one-line reason, on stderr (at most :data:`MAX_ERRORS`)."""
    if not failed:
        return
    typer.echo(f"{len(failed)} run(s) or record(s) could not be read and are left out:", err=True)
    for entry in failed[:MAX_ERRORS]:
        typer.echo(f"  {entry['run']}: {entry['reason']}", err=True)
    if len(failed) > MAX_ERRORS:
        typer.echo(f"  ... and {len(failed) - MAX_ERRORS} more", err=True)


def report_judge(judged: JudgePass, errors_file: Path | None) -> None:
    """Counts only: the errors quote model replies, so they go to a file, never to the terminal."""
    if not judged.errors:
        if judged.asked:
            typer.echo(f"judge: scored {judged.asked} attempt(s)", err=True)
        return
    where = f"; details in {errors_file}" if errors_file else ""
    typer.echo(f"judge: {len(judged.errors)} of {judged.asked} judgement(s) failed{where}", err=True)


def fail_if_useless(judged: JudgePass, examples: int) -> None:
    """Exit 1 with a reason when the command produced nothing useful."""
    if judged.all_failed:
        typer.echo(
            f"error: every one of the {judged.asked} judgement(s) failed, so nothing was scored; "
            "check the --judge spec (a judge must reply with a score list).",
            err=True,
        )
        raise typer.Exit(1)
    if examples == 0:
        typer.echo(
            "error: 0 examples: no plan to learn and no step matched a rule "
            "(unscored steps need --judge SPEC or judge_scores.json; see `data stats`).",
            err=True,
        )
        raise typer.Exit(1)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def print_stats(stats: Any) -> None:
    data = dataclasses.asdict(stats)
    typer.echo(
        f"trajectories: {data['trajectories']}, steps: {data['steps']}, attempts: {data['attempts']}, unscored steps: {data['unscored_steps']}"
    )
    typer.echo("rules matched (steps): " + _counts(data["rules"]))
    typer.echo("pools (steps): " + _counts(data["pools"]))
    typer.echo("examples: " + _counts(data["examples"]))
    for name, counts in data["labels"].items():
        typer.echo(f"labels {name}: true {counts['true']}, false {counts['false']}")
    if set(data["policies"]) - {"release"} or any(data["with_references"].values()):
        typer.echo("references policy (trajectories): " + _counts(data["policies"]))
        typer.echo("critic examples with references: " + _counts(data["with_references"]))
