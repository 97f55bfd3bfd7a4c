"""Sequence repair (loop.repair_budget): the review names steps, they are regenerated with references
within the budget, the trace keeps both versions and the review, the pages show the repair, and a run
killed during repair continues where it stopped."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker import Pipeline
from interleave_thinker.agents.seeds import call_seed
from interleave_thinker.agents.sequence_review import format_review, parse_review
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.run_folder import read_trace, trace_path
from interleave_thinker.core.types import Flag
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.replies import plan_reply, scripted_config, verdict

REPO = Path(__file__).resolve().parents[2]
REVIEW_TEMPLATE = REPO / "src" / "interleave_thinker" / "prompts" / "loop" / "review_sequence.txt"

PROMPTS = ("a grey cat on a mat", "the cat jumps", "the cat sleeps")
PLAN = plan_reply(*((f"Step {i}.", p, None) for i, p in enumerate(PROMPTS, start=1)))
REQUEST = "<image>A story about this cat"
INPUT = Image.new("RGB", (32, 32), (10, 20, 30))


def review(*steps: int) -> str:
    return format_review([Flag(step=s, reason=f"the cat changed colour in step {s}") for s in steps])


ACCEPT_ALL = [verdict(True)] * 3


def build(
    critic: list[str],
    generator: ScriptedImageBackend | None = None,
    reviewer: ScriptedVLMBackend | None = None,
    **loop: Any,
) -> dict[str, Any]:
    config = scripted_config(loop)
    built: dict[str, Any] = {
        "planner": ScriptedVLMBackend([PLAN]),
        "critic": ScriptedVLMBackend(critic),
        "generator": generator or ScriptedImageBackend(),
    }
    built["pipe"] = Pipeline(**built, config=config, templates=builtin_templates(), reviewer=reviewer)
    return built


def test_a_flagged_step_is_regenerated_with_references(tmp_path: Path) -> None:
    the_review = review(2)
    built = build([*ACCEPT_ALL, the_review, verdict(True)], repair_budget=3)
    result = built["pipe"](REQUEST, INPUT, out_dir=tmp_path)
    assert result.ok
    calls: list[ImageRequest] = built["generator"].calls
    assert len(calls) == 4 and all(c.references == () for c in calls[:3])  # the steps: the release's calls
    repair = calls[3]
    images = result.images
    assert repair.prompt == PROMPTS[1] and repair.image is not None
    assert repair.image.tobytes() == images["step01_attempt0.png"].tobytes()  # the image step 2 edited
    assert [r.tobytes() for r in repair.references] == [
        images["step01_attempt0.png"].tobytes(),
        INPUT.tobytes(),
    ]
    assert repair.seed == call_seed(0, "repair", 2, 0, 0) and repair.seed not in (100, 200, 201, 300)
    record = result.trace.repair
    assert record is not None and record.complete and record.error is None
    assert record.flagged == [Flag(step=2, reason="the cat changed colour in step 2")]
    assert record.raw_replies == [the_review] and record.seeds == [call_seed(0, "reviewer", 0, 0, 0)]
    assert record.template == hashlib.sha256(REVIEW_TEMPLATE.read_bytes()).hexdigest()
    [fixed] = record.steps
    assert (fixed.step_number, fixed.original_image, fixed.repaired_image) == (
        2,
        "step02_attempt0.png",
        "step02_repair0.png",
    )
    assert fixed.references == ["step01_attempt0.png", "input_1.png"]
    assert fixed.attempts[0].critic_seeds == [call_seed(0, "critic", 2, -1, 0)]
    assert result.trace.steps[1].accepted_image == "step02_attempt0.png"  # the original is kept
    assert [s.image_file for s in result.steps] == [
        "step01_attempt0.png",
        "step02_repair0.png",
        "step03_attempt0.png",
    ]
    page = (tmp_path / "document.md").read_text(encoding="utf-8")
    assert "images/step02_repair0.png" in page and "images/step02_attempt0.png" not in page
    assert 'class="accepted" src="images/step02_repair0.png"' in (tmp_path / "index.html").read_text(
        encoding="utf-8"
    )
    assert (tmp_path / "images" / "step02_attempt0.png").is_file()
    review_call = built["critic"].calls[3]
    assert len(ScriptedVLMBackend.images_in(review_call)) == 3
    assert f'step 2, which asked for "{PROMPTS[1]}"' in ScriptedVLMBackend.text_in(review_call)


def test_the_budget_bounds_the_repair_calls() -> None:
    rejections = [verdict(False, f"try {i}") for i in range(4)]
    built = build([*ACCEPT_ALL, review(3, 2), *rejections], repair_budget=4)
    result = built["pipe"](REQUEST, INPUT)
    calls = built["generator"].calls
    assert result.ok and len(calls) == 3 + 4
    record = result.trace.repair
    assert record is not None
    assert [(r.step_number, len(r.attempts), r.repaired_image) for r in record.steps] == [
        (2, 3, None),
        (3, 1, None),
    ]
    assert [c.prompt for c in calls[3:]] == [PROMPTS[1], "try 0", "try 1", PROMPTS[2]]  # step order, refined
    assert len({c.seed for c in calls}) == 7
    assert [s.image_file for s in result.steps] == [f"step0{i}_attempt0.png" for i in (1, 2, 3)]

    built = build([*ACCEPT_ALL, review(3, 2), *rejections], repair_budget=2)
    result = built["pipe"](REQUEST, INPUT)
    assert len(built["generator"].calls) == 3 + 2 and result.trace.repair is not None
    assert [(r.step_number, len(r.attempts)) for r in result.trace.repair.steps] == [(2, 2)]


def test_an_unparsable_review_repairs_nothing_and_the_run_succeeds(tmp_path: Path) -> None:
    garbage = "The cat looks fine to me."
    built = build([*ACCEPT_ALL, garbage, garbage, garbage], repair_budget=3)
    result = built["pipe"](REQUEST, INPUT, out_dir=tmp_path)
    assert result.ok and len(built["generator"].calls) == 3
    record = result.trace.repair
    assert record is not None and record.flagged is None and record.steps == []
    assert record.raw_replies == [garbage] * 3 and len(record.seeds) == 3
    assert record.error is not None and record.error.startswith(
        "The sequence review gave no usable verdict ("
    )
    assert "images/step02_attempt0.png" in (tmp_path / "document.md").read_text(encoding="utf-8")


def test_a_reviewer_of_its_own_is_asked_instead_of_the_critic() -> None:
    reviewer = ScriptedVLMBackend([review(3)], name="reviewer")
    built = build(
        [*ACCEPT_ALL, verdict(True)], reviewer=reviewer, repair_budget=1, repair_reviewer="scripted:reviewer"
    )
    result = built["pipe"](REQUEST, INPUT)
    assert len(reviewer.calls) == 1 and len(built["critic"].calls) == 4
    assert result.trace.repair is not None and result.trace.repair.reviewer == "reviewer"
    assert result.trace.settings["loop"]["repair_reviewer"] == "scripted:reviewer"


def test_without_a_budget_there_is_no_review() -> None:
    built = build(ACCEPT_ALL)
    result = built["pipe"](REQUEST, INPUT)
    assert result.trace.repair is None and len(built["critic"].calls) == 3
    assert "repair" not in result.trace.model_dump(mode="json")


class Killed(BaseException):
    """A kill: nothing of the run's own handling runs after it."""


class KilledAt(ScriptedImageBackend):
    def __init__(self, call: int) -> None:
        super().__init__()
        self.kill_at = call

    def generate(self, request: ImageRequest) -> Image.Image:
        if len(self.calls) == self.kill_at:
            raise Killed
        return super().generate(request)


def test_a_run_killed_during_repair_keeps_the_review_and_finished_repairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    the_review = review(2, 3)
    first = build([*ACCEPT_ALL, the_review, verdict(True)], KilledAt(4), repair_budget=4)
    with monkeypatch.context() as patch:  # a kill: no closing write, no pages
        patch.setattr(Pipeline, "_close_trace", lambda *args: None)
        patch.setattr(Pipeline, "_write_pages", lambda *args, **kwargs: None)
        with pytest.raises(Killed):
            first["pipe"](REQUEST, INPUT, out_dir=tmp_path)
    on_disk = read_trace(trace_path(tmp_path))
    assert on_disk is not None and on_disk.repair is not None and on_disk.repair.raw_replies == [the_review]
    assert [r.step_number for r in on_disk.repair.steps] == [2]
    repaired = (tmp_path / "images" / "step02_repair0.png").read_bytes()

    again = build([verdict(True)], repair_budget=4)
    result = again["pipe"](REQUEST, INPUT, out_dir=tmp_path, resume=True)
    assert result.ok and again["planner"].calls == []
    [call] = again["generator"].calls  # only step 3's repair runs again; no review, no step
    assert call.seed == call_seed(0, "repair", 3, 0, 0) and len(again["critic"].calls) == 1
    record = result.trace.repair
    assert record is not None and record.raw_replies == [the_review] and record.complete
    assert [(r.step_number, r.repaired_image) for r in record.steps] == [
        (2, "step02_repair0.png"),
        (3, "step03_repair0.png"),
    ]
    assert (tmp_path / "images" / "step02_repair0.png").read_bytes() == repaired
    page = (tmp_path / "document.md").read_text(encoding="utf-8")
    assert "images/step02_repair0.png" in page and "images/step03_repair0.png" in page


def test_the_review_reply_is_read_within_bounds() -> None:
    assert parse_review("<answer>{'inconsistent_steps': []}</answer>", [1, 2]) == []
    flags = parse_review(
        format_review([Flag(step=2, reason="r" * 5000), Flag(step=2, reason="again")]), [1, 2]
    )
    assert flags == [Flag(step=2, reason="r" * 1000)]
    for bad in ("[{'step': 5, 'reason': 'x'}]", "[{'step': True}]", "['2']", "{'steps': []}", "[[2]]"):
        with pytest.raises(ParseError):
            parse_review(f"<answer>{bad}</answer>", [1, 2])


def test_a_generator_that_takes_no_references_is_refused_at_load() -> None:
    from interleave_thinker.backends.specs import BackendOptions
    from interleave_thinker.core.errors import ConfigError

    class NoReferences(ScriptedImageBackend):
        max_references = 0

    from interleave_thinker.runtime.pipeline import _load_opt_in

    config = build(ACCEPT_ALL, NoReferences(), repair_budget=2)["pipe"].config
    with pytest.raises(ConfigError, match=r"loop\.repair_budget .* cannot take"):
        _load_opt_in(config, NoReferences(), BackendOptions(), builtin_templates())
    config = build(ACCEPT_ALL, NoReferences())["pipe"].config
    assert _load_opt_in(config, NoReferences(), BackendOptions(), builtin_templates()) == (
        None,
        None,
    )  # no repair


def test_a_reviewer_of_its_own_is_limited_and_counted_in_a_batch(tmp_path: Path) -> None:
    """The batch puts the opt-in backends behind limiters like the others: the reviewer's calls are in
    the per-backend statistics, under its own role."""
    reviewer = ScriptedVLMBackend([review(3)], name="reviewer")
    built = build(
        [*ACCEPT_ALL, verdict(True)], reviewer=reviewer, repair_budget=1, repair_reviewer="scripted:r"
    )
    store = RunStore(tmp_path)
    store.open({"input": "in", "ids": ["a"], "settings": {}}, resume=False)
    runner = BatchRunner(built["pipe"], store, BatchSettings(concurrency=1))
    INPUT.save(tmp_path / "input.png")
    outcome = runner.run([BatchItem("a", REQUEST, images=(str(tmp_path / "input.png"),))])
    assert outcome.finished == {"a": "succeeded"} and len(reviewer.calls) == 1
    assert {role: s.calls for role, s in outcome.stats.items()} == {
        "planner": 1,
        "critic": 4,
        "generator": 4,
        "reviewer": 1,
    }
    trace = read_trace(trace_path(store.request_dir("a")))
    assert trace is not None and trace.repair is not None and trace.repair.reviewer == "reviewer"
