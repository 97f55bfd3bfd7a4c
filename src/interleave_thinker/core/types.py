"""Typed records of one interleaved generation: request, plan, verdicts, attempts and the trace.

Everything a run produces is one of these pydantic models, so a trace on disk can be read back
into the same objects by reports, resume and training-data builders (``core.run_folder.load_trace``,
which checks ``schema_version`` and migrates older traces).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

SCHEMA_VERSION = 4
"""Version of ``trace.json``; older ones are migrated on read (``core/run_folder.py``).

2: ``StepRecord.planned_prompt``. 3: ``Attempt.scores`` (the judge's SC/PQ, from `data generate`).
4: ``PlannerRecord.seeds`` and ``Attempt.critic_seeds`` (the seed of every planner and critic call).
"""
WHITE_CANVAS = "white-canvas"
"""Name recorded as the "before" image of a text-to-image attempt (the release's white canvas)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _OmitsAbsent(_Model):
    """A record whose opt-in fields (:attr:`OPT_IN`) are left out of its dump while None, so a run
    without the opt-in settings writes the same trace, byte for byte, as before the fields existed."""

    OPT_IN: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        for name in self.OPT_IN:
            if getattr(self, name) is None:
                data.pop(name, None)
        return data


class Request(_Model):
    """What the user asked for: text, optionally with an image sequence (guidance mode)."""

    text: str
    images: list[str] = Field(default_factory=list, description="Paths of the input images, in order.")
    id: str | None = None
    task: str | None = None

    @property
    def mode(self) -> Literal["narrative", "guidance"]:
        return "guidance" if self.images else "narrative"


class PlanStep(_Model):
    """One step of the planner's execution plan, with the release's field names."""

    step_number: int
    step_name: str | None = None
    instruction: str | None = None
    prompt: str | None = None
    auxiliary_text: str | None = None

    @property
    def is_text_answer(self) -> bool:
        """Guidance "Task A": no instruction and no prompt, the answer is in ``auxiliary_text``."""
        return self.instruction is None and self.prompt is None

    @property
    def generation_prompt(self) -> str | None:
        return self.prompt if self.prompt is not None else self.instruction

    @property
    def output_text(self) -> str | None:
        """The step's text in the output, as the release picks it."""
        if self.auxiliary_text is not None and self.auxiliary_text.strip() not in ("", "None"):
            return self.auxiliary_text
        return self.instruction


class Plan(_Model):
    steps: list[PlanStep]
    reasoning: str | None = Field(default=None, description="The planner's <think> text, when present.")
    fallback: bool = Field(default=False, description="True when the single-step fallback made this plan.")


class Verdict(_Model):
    """The critic's judgement of one attempt."""

    success: bool
    refine_prompt: str
    reasoning: str | None = None


class Durations(_Model):
    generate_s: float = 0.0
    critic_s: float = 0.0


class AttemptScores(_Model):
    """The judge's scores of one attempt, made in the run (`data generate`): SC and PQ 0-10, or the error."""

    sc: float | None = None
    pq: float | None = None
    error: str | None = None
    raw_replies: dict[str, list[str]] = Field(default_factory=dict, description="Judge replies by kind.")


class Attempt(_Model):
    """One generator call for a step and, unless skipped, the critic's verdict on it."""

    step_number: int
    attempt: int
    prompt: str
    seed: int
    before_image: str = Field(description=f"File name of the 'before' image, or '{WHITE_CANVAS}'.")
    references: list[str] = Field(
        default_factory=list,
        exclude_if=lambda names: not names,
        description="File names of the reference images sent with the call and shown to the critic, in "
        "order (``loop.references``); left out of the JSON when none, so a released loop's trace is unchanged.",
    )
    image_file: str | None = None
    critic_called: bool = False
    critic_raw: list[str] = Field(default_factory=list, description="Every raw critic reply, in order.")
    critic_seeds: list[int] = Field(
        default_factory=list,
        description="The seed of every critic call, in order (agents/seeds.py; a call with no reply has one).",
    )
    verdict: Verdict | None = None
    critic_error: str | None = None
    generation_error: str | None = None
    accepted: bool = False
    forced: bool = Field(default=False, description="Accepted as the last attempt without a verdict.")
    scores: AttemptScores | None = Field(default=None, description="Judge scores, when judged in the run.")
    durations: Durations = Field(default_factory=Durations)


class Selection(_Model):
    """Which attempt a step kept when the critic accepted none (``loop.select_best``), and why."""

    attempt: int = Field(description="The kept attempt's number (``Attempt.attempt``).")
    by: Literal["critic", "judge"]
    reason: str
    raw_replies: list[str] = Field(default_factory=list, description="The critic's ranking replies.")
    seeds: list[int] = Field(default_factory=list, description="The seed of every ranking call.")
    error: str | None = Field(default=None, description="Why no ranking was usable (the last is then kept).")


class Speculated(_Model):
    """A step's first generator call (with ``loop.candidates``, one of its first round) made ahead, from
    an image the critic had not judged yet (``loop.speculate``): kept when that image was kept (the
    attempt's image is its image), else discarded, its image never written."""

    step_number: int
    attempt: int = Field(description="The attempt it was made for: 0, or one of the first round's.")
    seed: int
    prompt: str
    before_image: str = Field(
        description="File name the image it started from has (or would have) in the run."
    )
    speculative: Literal["kept", "discarded"]
    called: bool = Field(description="Whether its generator call began (False: cancelled before it did).")
    generate_s: float = Field(
        default=0.0, description="Time of its generator call until it ended or was cancelled."
    )


class StepRecord(_OmitsAbsent):
    OPT_IN: ClassVar[tuple[str, ...]] = ("selected",)

    step: PlanStep
    kind: Literal["image", "text"]
    text: str | None = None
    planned_prompt: str | None = Field(
        default=None,
        description="What the planner asked to generate: the first attempt's prompt and the critic's "
        "original instruction for every attempt (None for a text answer).",
    )
    attempts: list[Attempt] = Field(default_factory=list)
    accepted_image: str | None = None
    complete: bool = Field(default=False, description="False while the step's attempts are still running.")
    selected: Selection | None = Field(
        default=None, description="The attempt kept by ``loop.select_best`` (absent when it did not choose)."
    )
    speculations: list[Speculated] = Field(
        default_factory=list,
        exclude_if=lambda made: not made,
        description="Generator calls made ahead (``loop.speculate``) and settled while this step ran, kept or "
        "discarded; left out of the JSON when none, so a trace without speculation is unchanged.",
    )

    @property
    def accepted_attempt(self) -> Attempt | None:
        return next((a for a in self.attempts if a.accepted), None)

    @property
    def failed(self) -> bool:
        """An image step that kept no image (every attempt refused or failed, none forced)."""
        return self.kind == "image" and not self.accepted_image

    @property
    def settled(self) -> bool:
        """Complete and not failed: a step that a resume or a redo keeps as it is (one rule for both)."""
        return self.complete and not self.failed


class PlannerRecord(_Model):
    raw_replies: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    plan: Plan | None = None
    duration_s: float = 0.0
    seeds: list[int] = Field(
        default_factory=list,
        description="The seed of every planner call, in order (agents/seeds.py; a call with no reply has one).",
    )


class TemplateInfo(_Model):
    """Which prompt-template set a run used, and where it came from."""

    kind: Literal["released", "builtin", "custom"]
    origin: str
    digests: dict[str, str] = Field(default_factory=dict)


class Flag(_Model):
    """A step the sequence review says breaks the sequence's consistency, and why."""

    step: int
    reason: str


class StepRepair(_Model):
    """One flagged step regenerated after the last step: its attempts and, when the critic accepted one,
    the repaired image shown in its place (the original stays in ``StepRecord.accepted_image``)."""

    step_number: int
    reason: str
    original_image: str
    references: list[str] = Field(
        default_factory=list, description="The images sent as references, in order."
    )
    attempts: list[Attempt] = Field(default_factory=list)
    repaired_image: str | None = None
    complete: bool = False


class RepairRecord(_Model):
    """The sequence review (``loop.repair_budget``) and the repairs it led to."""

    reviewer: str = Field(description="The backend that reviewed the sequence.")
    template: str = Field(description="SHA-256 of the review template (ours, ``prompts/``).")
    budget: int
    raw_replies: list[str] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    flagged: list[Flag] | None = Field(default=None, description="The parsed verdict; None when unusable.")
    error: str | None = Field(default=None, description="Why no repair was made, when the review failed.")
    steps: list[StepRepair] = Field(default_factory=list)
    complete: bool = False


TrainedRole = Literal["planner", "critic"]
"""The agents `train sft` and `train grpo` fine-tune (here so the CLI names them without importing ``train``)."""
FallbackRole = Literal["planner", "critic", "judge", "ranking", "review", "generator"]
FallbackKind = Literal[
    "forced", "unparsable", "unreachable", "selection_failed", "review_failed", "judgement_failed"
]


class Fallback(_Model):
    """One place where the run went on without what it asked for (``runtime/fallbacks.py`` names them):
    which role, what it did instead (``kind``), at which step (None: the whole request) and the error's
    first line."""

    role: FallbackRole
    kind: FallbackKind
    step: int | None = None
    error: str = ""


class RunParent(_Model):
    """The run a redo started from (``Pipeline.redo``, ``run --resume-from``): its steps before ``step``
    were taken from it as they are."""

    run: str = Field(description="The parent run's folder, as given.")
    step: int = Field(description="The first step generated again (1-based position).")
    instruction: str | None = Field(default=None, description="The new instruction of that step, when given.")
    seed_base: int | None = Field(
        default=None, description="The new loop.seed_base from that step on, when given."
    )


class Trace(_OmitsAbsent):
    """Everything that happened in one request, enough to audit, resume or build training data."""

    OPT_IN: ClassVar[tuple[str, ...]] = ("repair", "parent")

    schema_version: int = SCHEMA_VERSION
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    request: Request
    backends: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, object] = Field(default_factory=dict)
    templates: TemplateInfo | None = None
    input_images: list[str] = Field(default_factory=list, description="Copies of the input images.")
    planner: PlannerRecord = Field(default_factory=PlannerRecord)
    steps: list[StepRecord] = Field(default_factory=list)
    status: Literal["running", "succeeded", "failed"] = "running"
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    fallbacks: list[Fallback] = Field(
        default_factory=list,
        exclude_if=lambda events: not events,
        description="What the request went on without (read from the trace when it closes, "
        "``runtime/fallbacks.py``); left out of the JSON when none.",
    )
    duration_s: float = 0.0
    repair: RepairRecord | None = Field(
        default=None, description="The sequence review and its repairs (absent when loop.repair_budget is 0)."
    )
    parent: RunParent | None = Field(
        default=None, description="The run this one redid from a step (absent for a run of its own)."
    )

    # --- the sequence as shown ------------------------------------------------------------------
    # Every reader of a finished run (pages, documents, benchmark layouts, results.json, consistency
    # scoring, the demo) asks these, never picks an image itself: the image a step finally shows is its
    # repaired image when a repair was accepted (``repair``), else its accepted or selected image.

    def shown_image(self, step_number: int) -> str | None:
        """The image step ``step_number`` (1-based) shows; None for a text step or one without an image."""
        if self.repair is not None:
            for fixed in self.repair.steps:
                if fixed.step_number == step_number and fixed.repaired_image:
                    return fixed.repaired_image
        return self.steps[step_number - 1].accepted_image

    def shown_images(self) -> list[tuple[int, str]]:
        """``(step number, image file)`` of every step that shows an image, in step order."""
        shown = ((number, self.shown_image(number)) for number in range(1, len(self.steps) + 1))
        return [(number, name) for number, name in shown if name]

    def shown_steps(self) -> list[StepRecord]:
        """The steps as shown: copies whose ``accepted_image`` is the shown image (the trace keeps the
        original in its own ``StepRecord.accepted_image``)."""
        return [
            step.model_copy(update={"accepted_image": shown})
            if (shown := self.shown_image(number)) != step.accepted_image
            else step
            for number, step in enumerate(self.steps, start=1)
        ]
