"""`data generate --per-backend-limit ROLE=N` is what the served model sees, as for `batch`
(test_concurrency_limits.py).

`data generate` wraps every backend in a meter before the scheduler limits it; the meter used to hide
the served backend's ``set_concurrency``, so the transport stayed at its default 8 whatever the limit.
Real HTTP servers on 127.0.0.1 hold every call a while and record the most calls in flight at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.testing.doubles.counting import Counting
from interleave_thinker.testing.doubles.scripted_models import State, chat_reply, handler, text_of
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request

REQUESTS = 24


def teacher(request: Request) -> Reply:
    """Planner and critic by the scripted rule; anything else is the judge's prompt, scored 7/7."""
    if request.method == "GET":
        return Reply(body={"object": "list", "data": [{"id": "scripted", "object": "model"}]})
    body = request.json()
    text = text_of(body)
    if "User request:" in text or "meant to achieve" in text:
        return Reply(body=chat_reply(body, State()))
    reply = json.dumps({"score": [7], "reasoning": "scored"})
    return Reply(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]})


@pytest.fixture
def servers() -> Iterator[dict[str, tuple[str, Counting]]]:
    """A held (counted) and a fast server for the teachers and for the generator."""
    made: dict[str, tuple[str, Counting]] = {}
    started: list[LocalServer] = []
    for name, handle in (("chat", teacher), ("edit", handler("edit", State()))):
        for prefix, hold in (("slow-", True), ("", False)):
            counting = Counting(handle)
            server = LocalServer(counting if hold else handle).start()
            started.append(server)
            made[prefix + name] = (server.url, counting)
    yield made
    for server in started:
        server.close()


def run_generate(tmp_path: Path, chat: str, judge: str, generator: str, limits: list[str]) -> dict[str, Any]:
    """24 requests at concurrency 16, one attempt per step; the batch's summary.json."""
    inputs = tmp_path / "in.jsonl"
    rows = [{"id": f"r{i:02d}", "prompt": f"draw {i}"} for i in range(REQUESTS)]
    inputs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "teacher.json"
    config.write_text(
        json.dumps(
            {
                "preset": "tiny",
                "planner": f"openai:{chat}/v1#scripted",
                "critic": f"openai:{chat}/v1#scripted",
                "judge": f"openai:{judge}/v1#scripted",
                "generator": f"http:{generator}",
                "loop": {"max_attempts": 1},
                "generation": {"width": 32, "height": 32},
            }
        )
    )
    out = tmp_path / "out"
    args = ["data", "generate", "--config", str(config), "--input", str(inputs), "--out", str(out)]
    args += ["--concurrency", "16", "--quiet"]
    for limit in limits:
        args += ["--per-backend-limit", limit]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["total"] == REQUESTS
    assert summary["requests"]["unfinished"] == 0
    return summary


def test_a_generator_limit_above_eight_reaches_the_wire(
    servers: dict[str, tuple[str, Counting]], tmp_path: Path
) -> None:
    url, counting = servers["slow-edit"]
    chat = servers["chat"][0]
    summary = run_generate(tmp_path, chat, chat, url, ["generator=16"])
    assert counting.calls >= 2 * REQUESTS  # two or three steps per request
    assert counting.peak == 16  # was 8: the transport's default, under the meter
    assert summary["backends"]["generator"]["limit"] == 16


def test_a_planner_limit_holds_beside_the_critics_on_one_transport(
    servers: dict[str, tuple[str, Counting]], tmp_path: Path
) -> None:
    """Planner and critic share one served backend, metered apart: ``planner=12`` puts 12 plans on the
    wire at once (the critic's default limit, set after, used to shrink the transport back to 8). With
    one attempt per step the loop asks no critic, so the server sees one plan per request."""
    url, counting = servers["slow-chat"]
    summary = run_generate(tmp_path, url, servers["chat"][0], servers["edit"][0], ["planner=12"])
    assert counting.calls == REQUESTS
    assert counting.peak == 12  # 16 requests at once, 12 of them planning
    assert summary["backends"]["planner"]["limit"] == 12


def test_a_pool_files_slots_are_the_generators_limit(
    servers: dict[str, tuple[str, Counting]], tmp_path: Path
) -> None:
    """``host:port slots=N`` lines: their sum is the generator's limit through the meter, as in `batch`."""
    big, small = (Counting(handler("edit", State()), hold=0.1) for _ in range(2))
    started = [LocalServer(big).start(), LocalServer(small).start()]
    try:
        pool = tmp_path / "pool.txt"
        pool.write_text(f"{started[0].url} slots=3\n{started[1].url} slots=1\n")
        chat = servers["chat"][0]
        summary = run_generate(tmp_path, chat, chat, f"@{pool}", [])
    finally:
        for server in started:
            server.close()
    assert (big.peak, small.peak) == (3, 1)
    assert summary["backends"]["generator"]["limit"] == 4  # was 8: the meter hid the pool's capacity
