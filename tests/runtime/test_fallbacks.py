"""No run succeeds on fallbacks alone (issue 47): one row of the issue's table per test, each run from the
CLI against served doubles on 127.0.0.1 (a chat server whose critic, ranking, review and judge answer
"I cannot answer", the scripted "/edit" generator, and ports nobody listens on), asserting the event
recorded, the count in the summary, the line printed and the exit code."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.backends.image.omni_backend import OmniImagesBackend
from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import RunFailedError
from interleave_thinker.runtime.fallbacks import FALLBACKS_ONLY
from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.helpers.common import free_port
from tests.helpers.datagen import LOOP, Teachers, parts, plan_reply

GARBAGE = "I cannot answer"
FAST = {"max_retries": 0, "timeout": 5}


VERDICT = "<answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>"


class Agents:
    """A chat server's replies: good plans, and every other turn (critic, ranking, review, judge) answered
    badly until :attr:`mended`, from when on the critic approves."""

    def __init__(self) -> None:
        self.mended = False

    def __call__(self, request: Request) -> Reply:
        if request.method == "GET":
            return Reply(body={"object": "list", "data": [{"id": "teacher", "object": "model"}]})
        text, _ = parts(request.json())
        reply = GARBAGE
        if "User request:" in text or "You plan picture-making work" in text:
            reply = plan_reply(text)
        elif self.mended and "meant to achieve" in text:
            reply = VERDICT
        message = {"role": "assistant", "content": reply}
        return Reply(body={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    garbage = LocalServer(Agents()).start()
    mending = Agents()
    mended = LocalServer(mending).start()
    edit = LocalServer(scripted_models.handler("edit", scripted_models.State())).start()
    teachers = Teachers()
    yield {
        "garbage": f"openai:{garbage.url}/v1#teacher",
        "good": f"openai:{teachers.url}#teacher",
        "edit": f"http:{edit.url}",
        "dead_vlm": f"openai:http://127.0.0.1:{free_port()}/v1#teacher",
        "dead_edit": f"http:127.0.0.1:{free_port()}",
        "mending": mending,
        "mended": f"openai:{mended.url}/v1#teacher",
    }
    for server in (garbage, mended, edit, teachers.server):
        server.close()


def inputs(folder: Path, n: int, steps: str = "; a hat") -> Path:
    path = folder / "in.jsonl"
    rows = [{"id": f"r{i}", "prompt": f"Draw [[a cat {i}{steps}]]"} for i in range(n)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def config(folder: Path, planner: str, critic: str, generator: str, **extra: Any) -> Path:
    path = folder / "config.json"
    settings = {
        "preset": "tiny",
        "planner": planner,
        "critic": critic,
        "generator": generator,
        "remote": FAST,
        "generation": {"width": 32, "height": 32},
        **extra,
    }
    path.write_text(json.dumps(settings), encoding="utf-8")
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--concurrency", "1", "--quiet"])


def summary(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "summary.json").read_text()))


def trace(out: Path, request_id: str) -> dict[str, Any]:
    return dict(json.loads((out / "requests" / request_id / "trace.json").read_text()))


# -- `run` / `batch`, critic never parses; `--select-best critic` and `--repair-budget` fail too ------


@pytest.fixture(scope="module")
def garbage_batch(servers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = tmp_path_factory.mktemp("garbage")
    cfg = config(folder, servers["garbage"], servers["garbage"], servers["edit"], loop={"max_attempts": 2})
    out = folder / "out"
    args = ["batch", "--config", str(cfg), "--input", str(inputs(folder, 2)), "--out", str(out)]
    flags = ("--select-best", "critic", "--repair-budget", "1", "--max-fallback-share", "1", "--preflight")
    return out, invoke(*args, *flags)


def test_a_critic_that_never_parses_is_counted_and_shown(garbage_batch: tuple[Path, Any]) -> None:
    out, result = garbage_batch
    assert result.exit_code == 0, result.output  # tolerated (--max-fallback-share 1): the release's rules ran
    assert "preflight: planner, critic, generator answered" in result.output  # any reply passes it
    recorded = trace(out, "r0")
    assert recorded["status"] == "succeeded"
    assert [(e["role"], e["kind"], e["step"]) for e in recorded["fallbacks"]] == [
        ("critic", "unparsable", 1),
        ("critic", "forced", 1),
        ("ranking", "selection_failed", 1),
        ("critic", "unparsable", 2),
        ("critic", "forced", 2),
        ("ranking", "selection_failed", 2),
        ("review", "review_failed", None),
    ]
    assert "Fallback: critic kept without a verdict at step 1" in "\n".join(recorded["warnings"])
    counts = summary(out)["fallbacks"]
    assert counts["events"] == {
        "critic": {"forced": 4, "unparsable": 4},
        "ranking": {"selection_failed": 4},
        "review": {"review_failed": 2},
    }
    # one failed verdict is one judgement, whatever its retries (3 replies each here)
    assert counts["judgements"]["critic"] == {"asked": 4, "answered": 0, "failed": 4}
    assert len(recorded["steps"][0]["attempts"][0]["critic_raw"]) == 3
    assert counts["requests"] == 2
    assert (
        "fallbacks in 2 request(s): critic 4 forced, critic 4 unparsable, ranking 4 selection failed, "
        "review 2 review failed"
    ) in result.output


def test_the_pages_mark_forced_steps_failed_selection_and_review(garbage_batch: tuple[Path, Any]) -> None:
    out, _ = garbage_batch
    page = (out / "requests" / "r0" / "index.html").read_text()
    assert "Fallback: critic kept without a verdict at step 1" in page
    assert "Fallback: ranking selection failed, last attempt kept at step 1" in page
    assert "Fallback: review review failed, nothing repaired" in page
    report = (out / "report.html").read_text()
    assert "7 fallbacks" in report


def test_run_prints_each_fallback_and_their_count(servers: dict[str, Any], tmp_path: Path) -> None:
    garbage = servers["garbage"]
    cfg = config(tmp_path, garbage, garbage, servers["edit"], loop={"max_attempts": 2})
    out = tmp_path / "one"
    result = CliRunner().invoke(app, ["run", "Draw [[a cat]]", "--config", str(cfg), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "warning: Fallback: critic unparsable reply at step 1: the reply holds no JSON" in result.output
    assert "fallbacks in 1 request(s): critic 1 forced, critic 1 unparsable" in result.output


def test_past_the_tolerated_share_the_batch_stops_and_resumes(
    servers: dict[str, Any], tmp_path: Path
) -> None:
    chat = servers["mended"]
    cfg = config(tmp_path, chat, chat, servers["edit"], loop={"max_attempts": 2})
    out = tmp_path / "out"
    args = ["batch", "--config", str(cfg), "--input", str(inputs(tmp_path, 7)), "--out", str(out)]
    stopped = invoke(*args)
    assert stopped.exit_code == 1
    assert isinstance(stopped.exception, RunFailedError)
    assert str(stopped.exception).startswith(
        "10 of 10 critic judgements failed (100%), above the tolerated 50%"
    )
    journal = (out / "journal.jsonl").read_text().splitlines()
    assert len(journal) == 5  # two critic calls a request: the fifth reached the 10 needed to judge
    servers["mending"].mended = True  # the critic is fixed: the same command continues
    resumed = invoke(*args)
    assert resumed.exit_code == 0, resumed.output
    assert "7 succeeded, 0 failed (5 already finished)" in resumed.output
    # the earlier requests keep their fallbacks, counted and shown; the new ones have none
    assert summary(out)["fallbacks"]["events"] == {"critic": {"forced": 10, "unparsable": 10}}
    assert "fallbacks in 5 request(s)" in resumed.output


def test_a_dead_generator_is_a_failed_batch(servers: dict[str, Any], tmp_path: Path) -> None:
    cfg = config(tmp_path, servers["good"], servers["good"], servers["dead_edit"])
    out = tmp_path / "out"
    result = invoke("batch", "--config", str(cfg), "--input", str(inputs(tmp_path, 2)), "--out", str(out))
    assert result.exit_code == 1
    assert "0 succeeded, 2 failed" in result.output
    message = str(result.exception)
    assert message.startswith("No request succeeded (2 failed; most frequent reason: ")
    assert "ConnectError: Cannot connect to host 127.0.0.1" in message
    assert summary(out)["backend_errors"]["calls"] == {"generator": 6}  # three attempts each
    generator = summary(out)["backends"]["generator"]
    assert generator["calls"] == generator["failed"] == 6  # counted as data generate counts them


def test_the_preflight_stops_a_batch_whose_generator_is_down_before_any_request(
    servers: dict[str, Any], tmp_path: Path
) -> None:
    dead = servers["dead_edit"]
    cfg = config(tmp_path, servers["good"], servers["good"], dead)
    out = tmp_path / "out"
    args = ["batch", "--config", str(cfg), "--input", str(inputs(tmp_path, 2)), "--out", str(out)]
    result = invoke(*args, "--preflight")
    assert result.exit_code == 1
    message = str(result.exception)
    assert message.startswith(f"preflight: the generator {dead} did not answer one 32x32 image (")
    assert "Connection refused" in message
    assert "--no-preflight (remote.preflight: false) skips this check" in message
    assert not (out / "journal.jsonl").exists() or not (out / "journal.jsonl").read_text().strip()
    assert not (out / "requests").exists()  # no request started


def test_the_preflight_of_eval_generate_base_mode_asks_the_generator_alone(
    servers: dict[str, Any], tmp_path: Path
) -> None:
    dead = servers["dead_edit"]
    # the planner and critic are dead too: base mode never calls them, so the preflight does not either
    cfg = config(tmp_path, servers["dead_vlm"], servers["dead_vlm"], dead)
    data = tmp_path / "ueval.json"
    data.write_text(json.dumps([{"id": "a", "prompt": "Draw a map of an island", "task": "space"}]))
    out = tmp_path / "out"
    args = ["eval", "generate", "ueval", "--data", str(data), "--mode", "base", "--out", str(out)]
    result = invoke(*args, "--config", str(cfg), "--preflight")
    assert result.exit_code == 1
    assert str(result.exception).startswith(
        f"preflight: the generator {dead} did not answer one 32x32 image ("
    )


# -- `data generate` ---------------------------------------------------------------------------------


def data_generate(folder: Path, cfg: Path, n: int = 2) -> tuple[Path, Any]:
    out = folder / "out"
    source = inputs(folder, n, steps="")  # one step: the authors' budget is all its own
    result = invoke("data", "generate", "--config", str(cfg), "--input", str(source), "--out", str(out))
    return out, result


def test_data_generate_with_a_critic_that_never_parses_succeeds_nowhere(
    servers: dict[str, Any], tmp_path: Path
) -> None:
    garbage = servers["garbage"]
    cfg = config(tmp_path, garbage, garbage, servers["edit"], judge=servers["good"], loop=LOOP)
    out, result = data_generate(tmp_path, cfg)
    assert result.exit_code == 1
    assert "0 succeeded, 2 failed" in result.output
    recorded = trace(out, "r0")
    assert recorded["status"] == "failed"
    assert recorded["error"].startswith(f"{FALLBACKS_ONLY} the critic gave no verdict on any of 4 attempts")
    record = json.loads((out / "requests" / "r0" / "execution_record.json").read_text())
    assert (record["status"], record["steps"]) == ("failed", [])
    assert summary(out)["fallbacks"]["events"]["critic"] == {"forced": 2, "unparsable": 8}
    exported = CliRunner().invoke(
        app,
        ["data", "export", "--input", str(out), "--format", "interleaved-easy", "--out", str(tmp_path / "x")],
    )
    assert exported.exit_code == 1
    assert "runs: 2, kept: 0" in exported.output
    assert "dropped 2: `data generate` failed the request" in exported.output


def test_data_generate_with_the_judge_down_counts_the_judge(servers: dict[str, Any], tmp_path: Path) -> None:
    good = servers["good"]
    cfg = config(tmp_path, good, good, servers["edit"], judge=servers["dead_vlm"], loop=LOOP)
    out, result = data_generate(tmp_path, cfg)
    assert result.exit_code == 1
    figures = summary(out)
    judged = figures["fallbacks"]["judgements"]["judge"]
    assert judged["answered"] == 0 and judged["failed"] == judged["asked"] > 0
    assert figures["fallbacks"]["events"]["judge"] == {"unreachable": judged["asked"]}
    calls = 2 * judged["asked"]  # SC and PQ: two calls a judgement, none answered
    assert figures["backend_errors"]["calls"]["judge"] == calls
    assert figures["usage"]["judge"]["failed"] == figures["usage"]["judge"]["calls"] == calls
    error = trace(out, "r0")["steps"][0]["attempts"][0]["scores"]["error"]
    assert error.startswith("SC judgement got no reply (backend error: ")
    assert f"judge: {calls} calls ({calls} failed, no reply)" in result.output
    assert trace(out, "r0")["error"].startswith(f"{FALLBACKS_ONLY} the judge scored none of")


def test_the_preflight_names_the_dead_judge_of_data_generate(servers: dict[str, Any], tmp_path: Path) -> None:
    good, dead = servers["good"], servers["dead_vlm"]
    cfg = config(tmp_path, good, good, servers["edit"], judge=dead, loop=LOOP)
    out = tmp_path / "out"
    source = inputs(tmp_path, 2, steps="")
    result = invoke(
        "data", "generate", "--config", str(cfg), "--input", str(source), "--out", str(out), "--preflight"
    )
    assert result.exit_code == 1
    assert str(result.exception).startswith(
        f"preflight: the judge {dead} did not answer a one-line chat call ("
    )
    assert not (out / "requests").exists()


# -- the silent defaults ---------------------------------------------------------------------------


def test_built_in_templates_standing_in_are_a_warning(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    chat = servers["garbage"]
    settings = PipelineConfig(planner=chat, critic=chat, generator=servers["edit"])
    with caplog.at_level(logging.WARNING), Pipeline.from_config(settings):
        pass
    assert any("Released prompt templates unavailable" in r.getMessage() for r in caplog.records)


def test_omni_defaults_for_an_unnamed_model_are_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with LocalServer(lambda request: Reply(404, {"error": "no"})) as server:
        backend = OmniImagesBackend(server.url)
        with caplog.at_level(logging.WARNING):
            assert backend.served_model() == ""
        backend.close()
    message = "\n".join(r.getMessage() for r in caplog.records)
    assert "not in the model-defaults table" in message and "28 steps and guidance 3.5" in message
