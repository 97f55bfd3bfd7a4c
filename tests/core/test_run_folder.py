"""The run folder's trace schema: a trace written before schema 2 loads (migrated), resumes and feeds data
building; a newer or unknown version is refused with the file, the version and the fix, and never taken
for a broken trace that a resume would clear.

``fixtures/trace_v1/`` is a run folder written by the pipeline at schema 1 (commit 77d3c26, before the
run-folder module): :func:`fixture_pipeline` run on :data:`FIXTURE_PROMPT` with ``out_dir``, its pages
removed. It is kept as written then, so it must never be regenerated with the current code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from interleave_thinker import Pipeline
from interleave_thinker.agents.seeds import call_seed
from interleave_thinker.core.errors import InputError, TraceVersionError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.run_folder import (
    SUPPORTED_VERSIONS,
    has_pages,
    load_trace,
    read_trace,
    trace_json,
    trace_path,
)
from interleave_thinker.core.types import SCHEMA_VERSION
from interleave_thinker.runtime.resume import reopen_if_failed
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from interleave_thinker.train.data.trajectories import discover
from tests.helpers.common import stable
from tests.helpers.pipelines import scripted_config
from tests.helpers.runs import FIXTURE_PROMPT
from tests.helpers.runs import V1_RUN as FIXTURE

PLAN = (
    "<think>plan</think><answer>{'execution_plan': [{'step_number': 1, 'step_name': 'Sketch', "
    "'instruction': 'Draw a cat.', 'prompt': 'a cat sketch', 'auxiliary_text': None}, "
    "{'step_number': 2, 'step_name': 'Answer', 'instruction': None, 'prompt': None, "
    "'auxiliary_text': 'an orange cat on a mat'}]}</answer>"
)
NO = "<think>too pale</think><answer>{'previous_step_success': False, 'refine_prompt': 'a bold cat sketch'}</answer>"
YES = "<think>fine</think><answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>"


def fixture_pipeline(critic: tuple[str, ...] = (NO, YES, YES)) -> Pipeline:
    """The pipeline that wrote the fixture: step 2 is a text answer generated as an image."""
    config = scripted_config(
        16, 2, agents={"max_new_tokens": 8}, loop={"text_steps": "generate", "seed_base": 7}
    )
    return Pipeline(
        planner=ScriptedVLMBackend([PLAN]),
        critic=ScriptedVLMBackend(list(critic)),
        generator=ScriptedImageBackend(),
        config=config,
        templates=builtin_templates(),
    )


def test_the_fixture_is_a_schema_1_trace() -> None:
    raw = json.loads((FIXTURE / "trace.json").read_text(encoding="utf-8"))
    assert raw["schema_version"] == 1 and SCHEMA_VERSION == 4 and SUPPORTED_VERSIONS == (1, 2, 3, 4)
    assert all("planned_prompt" not in step for step in raw["steps"])
    assert not has_pages(FIXTURE)


def test_a_schema_1_trace_is_migrated_on_read(v1_run: Path) -> None:
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    trace = load_trace(trace_path(v1_run))
    assert trace.schema_version == 4
    assert [s.planned_prompt for s in trace.steps] == ["a cat sketch", "an orange cat on a mat"]
    # Nothing else changed: the migrated trace, without the new field, is the file as written.
    migrated = json.loads(trace_json(trace))
    for step in migrated["steps"]:
        del step["planned_prompt"]
        for attempt in step["attempts"]:
            assert attempt.pop("scores") is None  # schema 3: judge scores made in the run
            assert attempt.pop("critic_seeds") == []  # schema 4: the seed of every critic call
    assert migrated["planner"].pop("seeds") == []  # schema 4: the seed of every planner call
    assert migrated == {**raw, "schema_version": 4}
    # A trace without any version is the first schema.
    del raw["schema_version"]
    trace_path(v1_run).write_text(json.dumps(raw), encoding="utf-8")
    assert load_trace(trace_path(v1_run)).steps[1].planned_prompt == "an orange cat on a mat"


def test_the_migration_gives_what_the_current_pipeline_writes(v1_run: Path, tmp_path: Path) -> None:
    fresh = fixture_pipeline()(
        FIXTURE_PROMPT, out_dir=tmp_path / "now", request_id="v1-fixture", task="fixture"
    )
    assert fresh.ok
    written = json.loads(trace_path(tmp_path / "now").read_text(encoding="utf-8"))
    migrated = json.loads(trace_json(load_trace(trace_path(v1_run))))
    assert written["schema_version"] == 4
    # Schema 4 records each planner and critic call's seed; a schema-1 run recorded none.
    assert written["planner"].pop("seeds") == [call_seed(7, "planner", 0, 0, 0)]
    for step in written["steps"]:
        for attempt in step["attempts"]:
            seeds = attempt.pop("critic_seeds")
            assert seeds == (
                [call_seed(7, "critic", attempt["step_number"], attempt["attempt"], 0)]
                if attempt["critic_called"]
                else []
            )
    for step in migrated["steps"]:
        for attempt in step["attempts"]:
            assert attempt.pop("critic_seeds") == []
    assert migrated["planner"].pop("seeds") == []
    # What the run did (settings and template digests may be renamed or reworded by later versions).
    for key in ("request", "planner", "steps", "status", "input_images", "error", "warnings"):
        assert stable(written[key]) == stable(migrated[key]), key


def test_a_schema_1_run_resumes(v1_run: Path) -> None:
    # Finished: returned as it is, with the pages a kill (here: the fixture) left out written again.
    result = fixture_pipeline()(FIXTURE_PROMPT, out_dir=v1_run, resume=True)
    assert result.ok and [s.image_file for s in result.steps] == [
        "step01_attempt1.png",
        "step02_attempt0.png",
    ]
    assert has_pages(v1_run) and "an orange cat on a mat" in (v1_run / "index.html").read_text(
        encoding="utf-8"
    )
    # Interrupted during step 2: continued after step 1, written back as schema 2.
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    step1 = raw["steps"][0]
    raw.update(status="running", steps=[step1])
    trace_path(v1_run).write_text(json.dumps(raw), encoding="utf-8")
    (v1_run / "index.html").unlink()
    # Step 1's verdicts were given before the interruption: the critic now sees step 2 only.
    resumed = fixture_pipeline(critic=(YES,))(FIXTURE_PROMPT, out_dir=v1_run, resume=True)
    final = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    assert resumed.ok and final["schema_version"] == 4 and len(final["steps"]) == 2
    # schema 3 adds the judge scores, schema 4 the critic calls' seeds (none recorded before the resume)
    attempts1 = [{**a, "scores": None, "critic_seeds": []} for a in step1["attempts"]]
    assert stable(final["steps"][0]) == stable(
        {**step1, "planned_prompt": "a cat sketch", "attempts": attempts1}
    )
    assert final["steps"][1]["attempts"][0]["prompt"] == "an orange cat on a mat"
    assert has_pages(v1_run)


def test_data_building_reads_a_schema_1_run(v1_run: Path) -> None:
    (trajectory,) = discover(v1_run)
    planned = [a.planned_prompt for step in trajectory.steps for a in step.attempts]
    # Step 2 was generated from its auxiliary text, which the critic was shown as the instruction.
    assert planned == ["a cat sketch", "a cat sketch", "an orange cat on a mat"]
    assert [a.used_prompt for step in trajectory.steps for a in step.attempts] == [
        "a cat sketch",
        "a bold cat sketch",
        "an orange cat on a mat",
    ]


@pytest.mark.parametrize(
    ("version", "kind"),
    [(5, "newer than"), (99, "newer than"), (0, "unknown to"), ("2", "unknown to"), (True, "unknown to")],
)
def test_a_newer_or_unknown_version_is_refused_with_the_fix(v1_run: Path, version: object, kind: str) -> None:
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    raw["schema_version"] = version
    path = trace_path(v1_run)
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(TraceVersionError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert str(path) in message and f"schema_version {version!r} is {kind}" in message
    assert "reads versions 1, 2, 3, 4" in message and "upgrade interleave-thinker" in message
    assert isinstance(caught.value, InputError)  # a usage error: exit 2 with this one line
    with pytest.raises(TraceVersionError):
        read_trace(path)  # never "unreadable" (None), which a resume would clear


def test_a_newer_trace_is_never_cleared_or_rewritten(v1_run: Path, tmp_path: Path) -> None:
    raw = json.loads(trace_path(v1_run).read_text(encoding="utf-8"))
    raw.update(schema_version=5, status="failed", error="boom")
    text = json.dumps(raw)
    trace_path(v1_run).write_text(text, encoding="utf-8")
    with pytest.raises(TraceVersionError):
        reopen_if_failed(v1_run)  # `run --resume` of a failed run
    with pytest.raises(TraceVersionError):
        fixture_pipeline()(FIXTURE_PROMPT, out_dir=v1_run, resume=True)
    with pytest.raises(InputError, match="schema_version 5 is newer"):
        discover(v1_run)
    assert trace_path(v1_run).read_text(encoding="utf-8") == text
    assert sorted(p.name for p in (v1_run / "images").iterdir()) == sorted(
        p.name for p in (FIXTURE / "images").iterdir()
    )
    # In a batch folder, the report shows the request as failed with the reason and the fix.
    batch = tmp_path / "batch"
    shutil.copytree(v1_run, batch / "requests" / "r1")
    trace = RunStore(batch).traces()["r1"]
    assert trace.status == "failed" and trace.error is not None
    assert "schema_version 5 is newer" in trace.error and "upgrade" in trace.error


def test_an_unreadable_trace_is_none_for_the_tolerant_reader(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    assert read_trace(path) is None
    for text in ('{"schema_version": 1, "request": {', "[1, 2]", '{"schema_version": 2}'):
        path.write_text(text, encoding="utf-8")
        assert read_trace(path) is None
        with pytest.raises(ValueError):
            load_trace(path)


def test_a_batch_goes_on_and_leaves_a_newer_trace_as_it_is(tmp_path: Path) -> None:
    from interleave_thinker.runtime.batch_inputs import read_batch_input
    from tests.helpers.batch import Switch, items_file, run_batch

    items = read_batch_input(str(items_file(tmp_path)))
    folder = tmp_path / "out" / "requests" / "ok1"
    shutil.copytree(FIXTURE, folder)
    raw = json.loads(trace_path(folder).read_text(encoding="utf-8"))
    text = json.dumps({**raw, "schema_version": 5})
    trace_path(folder).write_text(text, encoding="utf-8")
    summary = run_batch(tmp_path / "out", items, Switch({}))
    assert summary["requests"] == {"total": 6, "succeeded": 5, "failed": 1, "unfinished": 0}
    assert any("schema_version 5 is newer" in reason for reason in summary["failure_reasons"])
    assert trace_path(folder).read_text(encoding="utf-8") == text
    assert sorted(p.name for p in (folder / "images").iterdir()) == sorted(
        p.name for p in (FIXTURE / "images").iterdir()
    )
