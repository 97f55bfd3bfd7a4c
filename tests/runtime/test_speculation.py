"""Speculative next steps (``loop.speculate``, runtime/speculation.py): the next step's first call starts
from an image the critic is still judging; what is kept is always what the sequential loop keeps.

Served tests run real HTTP servers on 127.0.0.1 (testing/doubles/seeded.py): the generator paints the seed
it was sent, the critic accepts by a seeded hash of the seed (probability p) after a short latency, so a
speculative call is on the wire while the critic judges its source image, and some sources are rejected.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.cli.main import app
from interleave_thinker.core import green
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import read_trace
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.limits import BackendStats, LimitedImage
from interleave_thinker.runtime.speculation import SPECULATIVE
from interleave_thinker.testing.doubles.seeded import SeededWorld, chance, read_paint
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from interleave_thinker.testing.scripted import ScriptedImageBackend
from tests.helpers.release_loop import GOLDEN, folder, normalised, release_request

PROMPT = "Draw a fox"
"""A request of three image steps (``plan_reply``)."""
PROMPTS = (PROMPT, "Paint a lighthouse at dawn")


def _decoded(encoded: str) -> Image.Image:
    with Image.open(io.BytesIO(base64.b64decode(encoded))) as opened:
        return opened.convert("RGB")


def kept(trace: Trace) -> str:
    """The trace as the sequential loop would write it: clock readings, the calls made ahead and the
    setting left out."""
    loop = trace.settings.get("loop")
    if isinstance(loop, dict):
        loop.pop("speculate", None)
    for step in trace.steps:
        step.speculations = []
    return normalised(trace)


# --- speculate 0 is the release; local backends keep the same sequence -------------------------------


def test_speculate_zero_writes_the_release_trace_byte_for_byte(tmp_path: Path) -> None:
    release_request(tmp_path / "zero", speculate=0)
    text, images = folder(tmp_path / "zero")
    assert text == GOLDEN.read_text(encoding="utf-8")  # made on main before loop.speculate existed
    assert "speculate" not in json.loads(text)["settings"]["loop"]
    assert "speculations" not in (tmp_path / "zero" / "trace.json").read_text(encoding="utf-8")
    assert len(images) == 8


@pytest.mark.parametrize("depth", [1, 2])
def test_local_backends_keep_the_release_sequence_with_speculation(tmp_path: Path, depth: int) -> None:
    """A local generator does not yield: a call made ahead runs when it is taken, so the scripted critic
    meets its replies in the release's order and the kept trace is the golden one."""
    release_request(tmp_path / "ahead", speculate=depth)
    trace = read_trace(tmp_path / "ahead" / "trace.json")
    assert trace is not None and trace.settings["loop"]["speculate"] == depth  # type: ignore[index]
    made = [s for step in trace.steps for s in step.speculations]
    assert kept(trace) == GOLDEN.read_text(encoding="utf-8")
    assert len(folder(tmp_path / "ahead")[1]) == 8  # no image made ahead and discarded was written
    # step 1's rejected attempts 0 and 1 were speculated on: discarded before their calls began
    assert [(s.step_number, s.before_image, s.speculative, s.called) for s in made][:2] == [
        (2, "step01_attempt0.png", "discarded", False),
        (2, "step01_attempt1.png", "discarded", False),
    ]
    assert ("kept", "step01_attempt2.png") in [(s.speculative, s.before_image) for s in made]


# --- served: every p and mode keeps the sequential run's trace ---------------------------------------


def settings(url: str, **loop: Any) -> dict[str, Any]:
    return {
        "planner": f"openai:{url}/v1#scripted",
        "critic": f"openai:{url}/v1#scripted",
        "generator": f"http:{url}",
        "loop": loop,
        "generation": {"width": 16, "height": 16, "steps": 1},
    }


def run_api(url: str, prompt: str, out: Path | None = None, resume: bool = False, **loop: Any) -> Trace:
    with Pipeline.from_config(PipelineConfig.resolve(preset="tiny", overrides=settings(url, **loop))) as pipe:
        return pipe(prompt, out_dir=out, resume=resume).trace


@pytest.fixture(scope="module")
def worlds() -> Iterator[dict[float, tuple[SeededWorld, str]]]:
    """One served world per p; the critic takes 30 ms, so a call made ahead is on the wire meanwhile."""
    made = {p: SeededWorld(accept=chance(p, 21), latency={"critic": 0.03}) for p in (0.3, 0.5, 0.8)}
    servers = {p: LocalServer(world) for p, world in made.items()}
    try:
        yield {p: (world, servers[p].__enter__().url) for p, world in made.items()}
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)


MODES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {"speculate": 1}),
    ({"references": "anchor", "max_attempts": 4}, {"speculate": 2}),
    ({"candidates": 3}, {"speculate": 1}),
]
"""(the sequential run's loop settings, what speculation adds to them)."""


@pytest.mark.parametrize("p", [0.3, 0.5, 0.8])
def test_every_mode_keeps_the_sequential_trace(
    worlds: dict[float, tuple[SeededWorld, str]], p: float
) -> None:
    """Step 1's first image is accepted and step 2's rejected (at every p, by the critic's salt): a call
    made ahead is kept, and one made from an image the critic then rejects is discarded."""
    world, url = worlds[p]
    for base, ahead_of in MODES:
        sequential = run_api(url, PROMPT, **base)
        mark = len(world.calls("generator", "start"))
        ahead = run_api(url, PROMPT, **base, **ahead_of)
        calls = world.calls("generator", "start")[mark:]
        assert ahead.status == sequential.status == "succeeded"
        made = {(s.before_image, s.speculative) for step in ahead.steps for s in step.speculations}
        ahead_steps = [step.model_copy(deep=True) for step in ahead.steps]
        assert kept(ahead) == kept(sequential), (p, base)
        assert len(calls) >= sum(len(s.attempts) for s in ahead.steps)  # and the discarded that began
        assert ("step01_attempt0.png", "kept") in made
        assert ("step02_attempt0.png", "discarded") in made  # rejected by the critic
        kept_round = {s.attempt for s in ahead_steps[1].speculations if s.speculative == "kept"}
        assert kept_round == set(range(base.get("candidates", 1)))  # the whole first round made ahead
        step2 = ahead.steps[1].attempts
        assert step2[0].verdict is not None and not step2[0].verdict.success


def test_kill_mid_speculation_then_resume_equals_the_sequential_run(tmp_path: Path) -> None:
    """The run folder is copied (what a kill leaves) while step 3's first call, made ahead, is on the
    wire and step 2's image is being judged; the copy resumed equals the uninterrupted sequential run."""
    slow_step_2 = {200: 0.25}  # step 2's first verdict comes late, so step 3's call made ahead is on the wire
    world = SeededWorld(accept=chance(0.8, 21), critic_delay=lambda seed: slow_step_2.get(seed, 0.0))
    snapshot: dict[str, Path] = {}
    running = tmp_path / "running"

    def copy_when_ahead(request: Request) -> Reply:
        if request.path.endswith("/edit") and not snapshot:
            body = request.json()
            sent = body.get("image")
            source = read_paint(_decoded(sent))[0] if isinstance(sent, str) else None
            judged = {c["seed"] for c in world.calls("critic")}
            if int(body.get("seed") or 0) == 300 and source is not None and source not in judged:
                snapshot["at"] = tmp_path / "killed"  # step 2's image is still with the critic
                shutil.copytree(running, snapshot["at"])
        return world(request)

    prompt = PROMPT
    with LocalServer(copy_when_ahead) as server:
        whole = run_api(server.url, prompt, running, speculate=1)
        assert "at" in snapshot, "no call for step 3 was made ahead"
        on_disk = read_trace(snapshot["at"] / "trace.json")
        assert on_disk is not None and [s.complete for s in on_disk.steps] == [True]  # step 2 unfinished
        mark = len(world.calls("generator", "start"))
        run_api(server.url, prompt, snapshot["at"], resume=True, speculate=1)
        assert all(c["seed"] >= 200 for c in world.calls("generator", "start")[mark:])  # step 1 not redone
        run_api(server.url, prompt, tmp_path / "sequential")
    assert whole.status == "succeeded"
    resumed, sequential = folder(snapshot["at"]), folder(tmp_path / "sequential")
    trace = read_trace(snapshot["at"] / "trace.json")
    assert trace is not None
    assert (kept(trace), resumed[1]) == sequential


# --- the batch: flags, the generator's limit and the share of it calls made ahead may hold ------------


class Slow(ScriptedImageBackend):
    """A served-like generator (yields while it works) that notes the calls in flight made ahead."""

    cooperative = True

    def __init__(self) -> None:
        super().__init__(name="slow")
        self.ahead = self.peak_ahead = self.peak = self.busy = 0
        self.lock = threading.Lock()

    def generate(self, request: Any) -> Any:
        ahead = SPECULATIVE.get()
        with self.lock:
            self.busy += 1
            self.ahead += ahead
            self.peak, self.peak_ahead = max(self.peak, self.busy), max(self.peak_ahead, self.ahead)
        try:
            green.sleep(0.01)
            return super().generate(request)
        finally:
            with self.lock:
                self.busy -= 1
                self.ahead -= ahead


def test_calls_made_ahead_hold_at_most_their_share_of_the_generator_s_slots() -> None:
    inner = Slow()
    limited = LimitedImage(inner, BackendStats("generator", 4), speculate_share=0.5)

    def call(ahead: bool) -> None:
        SPECULATIVE.set(ahead)
        limited.generate(ImageRequest("p", seed=1, width=16, height=16))

    async def main() -> None:
        await asyncio.gather(*(green.run_green(call, i % 3 != 0) for i in range(12)))

    asyncio.run(main())
    assert inner.peak_ahead == 2 and inner.peak <= 4


def test_batch_flags_speculate_within_the_share_and_keep_the_sequential_traces(
    worlds: dict[float, tuple[SeededWorld, str]], tmp_path: Path
) -> None:
    _, url = worlds[0.5]
    lines = "".join(json.dumps({"id": f"r{i}", "prompt": p}) + "\n" for i, p in enumerate(PROMPTS))
    (tmp_path / "in.jsonl").write_text(lines, encoding="utf-8")
    (tmp_path / "settings.yaml").write_text(yaml.safe_dump(settings(url)), encoding="utf-8")
    args = ["batch", "--input", str(tmp_path / "in.jsonl"), "--preset", "tiny", "--quiet"]
    args += ["--config", str(tmp_path / "settings.yaml"), "--per-backend-limit", "generator=2"]
    for out, extra in (("seq", []), ("ahead", ["--speculate", "2", "--speculate-share", "0.5"])):
        result = CliRunner().invoke(
            app, [*args, "--out", str(tmp_path / out), *extra], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "bad"), "--speculate-share", "0"])
    assert isinstance(bad.exception, InputError) and "--speculate-share 0.0" in str(bad.exception)
    assert not (tmp_path / "bad").exists()  # refused before anything ran
    made = 0
    for i in range(len(PROMPTS)):
        seq = read_trace(tmp_path / "seq" / "requests" / f"r{i}" / "trace.json")
        ahead = read_trace(tmp_path / "ahead" / "requests" / f"r{i}" / "trace.json")
        assert seq is not None and ahead is not None
        assert ahead.settings["loop"]["speculate"] == 2  # type: ignore[index]
        made += sum(len(s.speculations) for s in ahead.steps)
        assert kept(ahead) == kept(seq)
    assert made > 0
