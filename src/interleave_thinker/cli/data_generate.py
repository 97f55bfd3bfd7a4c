"""`interleave-thinker data generate`: teacher trajectories, every attempt judged, resumable like `batch`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from interleave_thinker.cli.options import SchedulingFlags, SettingsFlags, with_scheduling_flags
from interleave_thinker.cli.scheduled import BatchInputOption, RequestsJob, end_run, run_scheduled, used_specs
from interleave_thinker.cli.scoring import JUDGE_TOKENS, JudgeTokensOption
from interleave_thinker.cli.specs import check_spec

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.datagen.generate import GenerateSettings, TeacherRun
    from interleave_thinker.runtime.scheduler import BatchSettings


@with_scheduling_flags()
def generate(
    settings: SettingsFlags,
    scheduling: SchedulingFlags,
    input: BatchInputOption,
    out: Annotated[
        Path, typer.Option(help="Batch folder: requests/<id>/ with trace.json and execution_record.json.")
    ],
    judge: Annotated[
        str | None,
        typer.Option(help="VLM spec of the judge scoring every attempt (SC/PQ) \\[default: config 'judge']."),
    ] = None,
    judge_max_new_tokens: JudgeTokensOption = JUDGE_TOKENS,
) -> None:
    """Teacher trajectories for training data: plan, generate, criticise and judge every attempt.

    Writes our traces and, beside each, the release's execution_record.json; summary.json counts the
    calls, tokens and images of every backend (and the estimated cost, with prices in the config).
    """
    from interleave_thinker.datagen.generate import check_judge

    # 1. Check everything cheap before loading a model.
    if judge:
        check_spec("--judge", judge, "vlm")
    cfg = settings.resolve()
    if judge:
        cfg.judge = judge
    check_judge(cfg)
    job = TeacherJob(cfg, input, out, scheduling, judge_max_new_tokens)
    # 2. Load the teachers and the judge, run; 3. the outcome.
    from interleave_thinker.datagen.generate_usage import usage_lines

    summary, skipped = run_scheduled(out, len(job.items), scheduling, job)
    outcome = job.teachers.outcome if job.teachers is not None else None
    usage = usage_lines(summary["usage"], summary["estimated_cost"])  # every backend, every run of the folder
    end_run(summary, skipped, outcome.stopped if outcome else None, out / "summary.json", details=usage)


class TeacherJob(RequestsJob["tuple[dict[str, Any], int]"]):
    """`data generate` on the scheduler: the teachers and the judge over the prompts."""

    log_name = "interleave_thinker.datagen"

    loading = "loading the teachers and the judge"

    def __init__(
        self, cfg: PipelineConfig, input: str, out: Path, flags: SchedulingFlags, judge_tokens: int
    ) -> None:
        super().__init__(cfg, input, out, flags)
        self.judge_tokens = judge_tokens
        self.resume = True
        self.teachers: TeacherRun | None = None

    def open(self, resume: bool, retry_failed: bool) -> int | None:
        self.resume = resume  # the store opens with the teachers (TeacherRun opens it before loading)
        return None

    def served(self) -> tuple[PipelineConfig, dict[str, str]]:
        return self.cfg, used_specs(self.cfg, judge=True)

    def load(self, settings: BatchSettings) -> None:
        from interleave_thinker.datagen.generate import TeacherRun

        build = functools.partial(self.build_runner, settings=settings)
        self.teachers = TeacherRun(
            self.cfg, self.items, self.out, self.source, self._settings(settings), build=build
        )

    def _settings(self, settings: BatchSettings) -> GenerateSettings:
        from interleave_thinker.datagen.generate import GenerateSettings

        return GenerateSettings(
            settings,
            resume=self.resume,
            judge_max_new_tokens=self.judge_tokens,
            accept_changed=self.accept_changed,
        )

    def pending(self) -> int:
        assert self.teachers is not None
        return self.teachers.pending()

    def run(self, on_done: Callable[[str, str], None]) -> tuple[dict[str, Any], int]:
        assert self.teachers is not None
        summary = self.teachers.run(on_done)
        return summary, self.teachers.outcome.skipped if self.teachers.outcome else 0
