"""One concurrency number per backend: ``--per-backend-limit ROLE=N`` is what the served model sees.

Before, the transport kept its own cap (``remote.concurrency``, 8) under the scheduler's limit, so
``--per-backend-limit generator=16`` still put 8 calls on the wire. Real HTTP servers on 127.0.0.1
hold every call a while and record the most calls they had in flight at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interleave_thinker.backends.remote import EndpointPool, RemoteCaller
from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.testing.doubles.counting import Counting
from interleave_thinker.testing.doubles.scripted_models import State, handler
from interleave_thinker.testing.doubles.server import LocalServer


@pytest.fixture
def servers() -> Iterator[dict[str, tuple[str, Counting | None]]]:
    """A counted and a fast server of each kind: ``chat`` (planner and critic) and ``edit`` (generator)."""
    made: dict[str, tuple[str, Counting | None]] = {}
    started: list[LocalServer] = []
    for kind in ("chat", "edit"):
        counting = Counting(handler(kind, State()))
        for name, handle in ((f"slow-{kind}", counting), (kind, handler(kind, State()))):
            server = LocalServer(handle).start()
            started.append(server)
            made[name] = (server.url, counting if name.startswith("slow") else None)
    yield made
    for server in started:
        server.close()


def run_batch(tmp_path: Path, planner: str, generator: str, limits: list[str]) -> dict[str, object]:
    """24 requests at concurrency 16 with one attempt per step; the batch's summary.json."""
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(
        "".join(json.dumps({"id": f"r{i:02d}", "prompt": f"draw {i}"}) + "\n" for i in range(24))
    )
    out = tmp_path / "out"
    args = ["batch", "--input", str(inputs), "--out", str(out), "--preset", "tiny", "--quiet"]
    args += ["--planner", f"openai:{planner}/v1#scripted", "--generator", f"http:{generator}"]
    args += ["--critic", f"openai:{planner}/v1#scripted", "--max-attempts", "1", "--concurrency", "16"]
    for limit in limits:
        args += ["--per-backend-limit", limit]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 24, "succeeded": 24, "failed": 0, "unfinished": 0}
    return summary


@pytest.mark.parametrize("limit", [16, 4])
def test_generator_limit_is_what_the_server_sees(
    servers: dict[str, tuple[str, Counting | None]], tmp_path: Path, limit: int
) -> None:
    url, counting = servers["slow-edit"]
    summary = run_batch(tmp_path, servers["chat"][0], url, [f"generator={limit}"])
    assert counting is not None and counting.calls >= 48  # two or three steps per request
    assert counting.peak == limit
    assert summary["backends"]["generator"]["limit"] == limit  # type: ignore[index]


@pytest.mark.parametrize("limit", [16, 4])
def test_vlm_limit_is_what_the_server_sees(
    servers: dict[str, tuple[str, Counting | None]], tmp_path: Path, limit: int
) -> None:
    """Planner and critic share one server and one backend here (same spec), so one limit holds both."""
    url, counting = servers["slow-chat"]
    summary = run_batch(tmp_path, url, servers["edit"][0], [f"planner={limit}"])
    assert counting is not None and counting.calls >= 24
    assert counting.peak == limit
    assert summary["backends"]["planner"]["limit"] == limit  # type: ignore[index]


def test_without_a_limit_remote_concurrency_is_the_one_number(
    servers: dict[str, tuple[str, Counting | None]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``remote.concurrency`` is the default of every served backend's limit (here 12, set by env)."""
    monkeypatch.setenv("INTERLEAVE_THINKER_REMOTE__CONCURRENCY", "12")
    url, counting = servers["slow-edit"]
    summary = run_batch(tmp_path, servers["chat"][0], url, [])
    assert counting is not None and counting.peak == 12
    assert summary["backends"]["generator"]["limit"] == 12  # type: ignore[index]


def test_a_transport_refuses_a_limit_below_one() -> None:
    caller = RemoteCaller("probe", EndpointPool(["http://127.0.0.1:9"]))
    caller.resize(3)
    assert caller.concurrency == 3
    with pytest.raises(ConfigError, match="probe: concurrency 0 must be >= 1"):
        caller.resize(0)
    assert caller.concurrency == 3
    caller.close()


@pytest.mark.parametrize("asked", [None, "generator=16"])
def test_per_endpoint_slots_of_a_pool_file_hold_on_each_server(
    servers: dict[str, tuple[str, Counting | None]], tmp_path: Path, asked: str | None
) -> None:
    """``host:port slots=N`` in a pool file: each server sees at most its N, the pool's capacity (their
    sum) is the generator's limit, and a larger ``--per-backend-limit`` is lowered to it."""
    big, small = Counting(handler("edit", State())), Counting(handler("edit", State()))
    started = [LocalServer(big).start(), LocalServer(small).start()]
    try:
        pool = tmp_path / "pool.txt"
        pool.write_text(f"{started[0].url} slots=3\n{started[1].url} slots=1  # the small GPU\n")
        summary = run_batch(tmp_path, servers["chat"][0], f"@{pool}", [asked] if asked else [])
    finally:
        for server in started:
            server.close()
    assert (big.peak, small.peak) == (3, 1)
    assert big.calls + small.calls >= 48 and big.calls > small.calls
    assert summary["backends"]["generator"]["limit"] == 4  # type: ignore[index]


def test_a_pool_never_puts_more_than_its_slots_on_an_endpoint() -> None:
    pool = EndpointPool(["http://a", "http://b"], slots={"http://a": 2, "http://b": 1})
    assert pool.capacity == 3
    taken = [pool.pick() for _ in range(3)]
    assert sorted(taken) == ["http://a", "http://a", "http://b"]
    pool.release("http://a")
    pool.mark_failed("http://b")
    assert pool.pick() == "http://a"  # the only endpoint with a free slot
    assert EndpointPool(["http://a", "http://b"], slots={"http://a": 2}).capacity is None
    with pytest.raises(ConfigError, match="must be >= 1 and name endpoints of the pool"):
        EndpointPool(["http://a"], slots={"http://c": 2})
