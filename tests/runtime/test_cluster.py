"""`batch --ray` on a real (simulated) Ray cluster: three nodes on this machine, each a real raylet.

One cluster serves the module (starting it is the expensive part); served doubles on 127.0.0.1 count
every call. The one-process run of the same input is the reference: the cluster's results, traces and
images must equal it, losing a node mid-run must change none of them, and the generator calls the lost
node's requests made again are bounded by the attempts it had in flight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import RunFailedError
from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.counting import Counting
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.helpers.common import REPO, cli_command, stable, tiny_dir, write

# Before Ray is imported: every node, the driver included, on the loopback address (Ray reads it once).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from interleave_thinker.runtime.cluster import NAMESPACE, worker_names  # noqa: E402

MAX_ATTEMPTS = 2
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "node_ip_address": "127.0.0.1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three nodes (the head and two more) and this process connected as the driver; all stopped after.

    Every worker process imports the package (a local-model one torch, transformers and diffusers):
    the compiled modules are kept in one folder of the module's, where this process writes them too,
    so each module is compiled once, not once per worker (the suite may run with bytecode writes off)."""
    home = tmp_path_factory.mktemp("home")
    env = {
        "INTERLEAVE_THINKER_TINY_DIR": tiny_dir(),
        "INTERLEAVE_THINKER_HOME": str(home),
        "INTERLEAVE_THINKER_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPYCACHEPREFIX": str(tmp_path_factory.mktemp("pycache")),
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)  # the raylets, and so the workers, start with these
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setattr(sys, "pycache_prefix", env["PYTHONPYCACHEPREFIX"])
        patch.setattr(sys, "dont_write_bytecode", False)
        head = {**NODE, "include_dashboard": False}
        made = Cluster(initialize_head=True, head_node_args=head)
        try:
            for _ in range(2):
                made.add_node(**NODE)
            made.wait_for_nodes()
            ray.init(address=made.address, logging_level="WARNING")
            yield made
        finally:
            ray.shutdown()
            made.shutdown()


@pytest.fixture(scope="module")
def doubles() -> Iterator[dict[str, LocalServer]]:
    """The scripted chat and "/edit" servers, in this process; every call logged at ``/log``."""
    states = {kind: scripted_models.State() for kind in ("chat", "edit")}
    handlers = {kind: scripted_models.handler(kind, state) for kind, state in states.items()}
    handlers["edit"] = Counting(handlers["edit"], hold=0.05)  # GPU-like latency, scaled down
    servers = {kind: LocalServer(handle) for kind, handle in handlers.items()}
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        server.close()


def calls(server: LocalServer) -> int:
    return len(httpx.get(f"{server.url}/log", timeout=10).json())


def inputs(folder: Path, n: int) -> Path:
    rows = (json.dumps({"id": f"r{i:02d}", "prompt": f"Show process number {i}"}) for i in range(n))
    return write(folder / "in.jsonl", "".join(row + "\n" for row in rows))


def batch(source: Path, out: Path, *args: str) -> None:
    """``interleave-thinker batch`` in this process (the driver)."""
    app(["batch", "--input", str(source), "--out", str(out), "--quiet", *args], standalone_mode=False)


def served(doubles: dict[str, LocalServer], chat_server: LocalServer | None = None) -> list[str]:
    chat = f"openai:{(chat_server or doubles['chat']).url}/v1#scripted"
    return [
        "--preset",
        "tiny",
        "--planner",
        chat,
        "--critic",
        chat,
        "--generator",
        f"http:{doubles['edit'].url}",
        "--max-attempts",
        str(MAX_ATTEMPTS),
        "--concurrency",
        "2",
    ]


def outcome(out: Path) -> tuple[Any, dict[str, Any], dict[str, bytes]]:
    """What two runs of one input must share: results.json, the traces (times aside) and every image."""
    traces = {
        p.parent.name: stable(json.loads(p.read_text())) for p in (out / "requests").glob("*/trace.json")
    }
    images = {str(p.relative_to(out)): p.read_bytes() for p in (out / "requests").glob("*/images/*.png")}
    return json.loads((out / "results.json").read_text()), traces, images


@pytest.fixture(scope="module")
def reference(
    doubles: dict[str, LocalServer], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, int]:
    """The one-process run of 12 requests: its input, its folder and the generator calls it made."""
    folder = tmp_path_factory.mktemp("reference")
    source = inputs(folder, 12)
    before = calls(doubles["edit"])
    batch(source, folder / "out", *served(doubles))
    return source, folder / "out", calls(doubles["edit"]) - before


def test_three_nodes_give_the_one_process_results(
    cluster: Cluster, doubles: dict[str, LocalServer], reference: tuple[Path, Path, int], tmp_path: Path
) -> None:
    source, one_process, generator_calls = reference
    before = calls(doubles["edit"])
    batch(source, tmp_path / "out", *served(doubles), "--ray", cluster.address)

    assert outcome(tmp_path / "out") == outcome(one_process)
    assert calls(doubles["edit"]) - before == generator_calls  # nothing done twice
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    nodes = summary["nodes"]
    assert len(nodes) == 3 and sum(n["workers"] for n in nodes.values()) == 3
    assert sum(n["succeeded"] + n["failed"] for n in nodes.values()) == 12
    assert summary["backends"]["generator"]["calls"] == generator_calls  # every worker's stats merged
    assert summary["backends"]["generator"]["limit"] == 3 * 8  # three workers' limits: the cluster's bound


@pytest.mark.slow  # three workers each load the tiny models (torch): ~40 s of CPU
def test_local_model_workers_make_the_one_process_images(cluster: Cluster, tmp_path: Path) -> None:
    source = inputs(tmp_path, 3)
    tiny = ["--preset", "tiny", "--max-attempts", "1", "--concurrency", "1"]
    batch(source, tmp_path / "one", *tiny)
    batch(source, tmp_path / "cluster", *tiny, "--ray", cluster.address)

    one, cluster_run = outcome(tmp_path / "one"), outcome(tmp_path / "cluster")
    assert cluster_run[2] and cluster_run == one  # byte for byte, three tiny-model workers
    nodes = json.loads((tmp_path / "cluster" / "summary.json").read_text())["nodes"]
    assert sum(n["workers"] for n in nodes.values()) == 3


def journaled(out: Path) -> int:
    journal = out / "journal.jsonl"
    return len(journal.read_text().splitlines()) if journal.exists() else 0


def test_a_killed_driver_run_again_resumes_losing_nothing_repeating_little(
    cluster: Cluster, doubles: dict[str, LocalServer], reference: tuple[Path, Path, int], tmp_path: Path
) -> None:
    """The driver (a child process) is killed mid-run; the same command again finishes the run."""
    source, one_process, generator_calls = reference
    out = tmp_path / "out"
    before = calls(doubles["edit"])
    command = cli_command("batch", "--input", str(source), "--out", str(out), "--quiet", *served(doubles))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    log = tmp_path / "driver.log"
    with log.open("w") as stderr:
        driver = subprocess.Popen([*command, "--ray", cluster.address], env=env, stderr=stderr)
    try:
        deadline = time.monotonic() + 300
        while driver.poll() is None and journaled(out) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        driver.kill()  # SIGKILL: its workers run on until Ray ends them with its job
        driver.wait(60)
    done = journaled(out)
    assert 3 <= done < 12, log.read_text()[-2000:]  # killed mid-run

    class Left:
        """Stands for a worker of the killed driver still running (named as the folder's workers are)."""

        def ping(self) -> str:
            return "alive"

    left = ray.remote(num_cpus=0)(Left).options(name=f"{worker_names(out)}-9", namespace=NAMESPACE).remote()
    assert ray.get(left.ping.remote()) == "alive"

    batch(source, out, *served(doubles), "--ray", cluster.address)

    with pytest.raises(ValueError):  # the new driver ended it before starting its own workers
        ray.get_actor(f"{worker_names(out)}-9", namespace=NAMESPACE)

    assert outcome(out) == outcome(one_process)
    assert journaled(out) == 12  # one line per request: none ran twice to its end
    in_flight = min(12 - done, 3 * 2)  # three workers of two requests each
    extra = calls(doubles["edit"]) - before - generator_calls
    assert 0 <= extra <= in_flight * MAX_ATTEMPTS  # only the killed run's unfinished steps were made again


GARBAGE = "I cannot answer"


def test_past_the_tolerated_fallback_share_the_cluster_stops_starting_requests(
    cluster: Cluster, doubles: dict[str, LocalServer], tmp_path: Path
) -> None:
    """agents.max_fallback_share (0.5 by default) holds on a cluster as in one process: a critic that never
    parses stops the run once the workers' judgements, summed at the driver, pass it."""
    scripted = scripted_models.handler("chat", scripted_models.State())

    def unparsable_critic(request: Request) -> Reply:
        if request.method == "POST" and "meant to achieve" in scripted_models.text_of(request.json()):
            message = {"role": "assistant", "content": GARBAGE}
            return Reply(body={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
        return scripted(request)

    out = tmp_path / "out"
    with LocalServer(unparsable_critic) as chat, pytest.raises(RunFailedError) as stopped:
        batch(inputs(tmp_path, 16), out, *served(doubles, chat), "--ray", cluster.address)

    message = str(stopped.value)
    assert "critic judgements failed (100%), above the tolerated 50%" in message
    assert int(message.split(" of ", 1)[0]) >= 10  # judged once ten were asked, as in one process
    # ten judgements are four or five finished requests (two or three image steps each); at most six were
    # in flight then, and none was started after: the rest are left for the next run
    assert 4 <= journaled(out) <= 5 + 6 < 16
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fallbacks"]["judgements"]["critic"]["answered"] == 0


def test_a_lost_node_loses_nothing_and_repeats_little(
    cluster: Cluster, doubles: dict[str, LocalServer], reference: tuple[Path, Path, int], tmp_path: Path
) -> None:
    """Runs last: the cluster keeps two nodes after it."""
    source, one_process, generator_calls = reference
    out = tmp_path / "out"
    before = calls(doubles["edit"])
    victim = next(iter(cluster.worker_nodes))
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            batch(source, out, *served(doubles), "--ray", cluster.address)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    driver = threading.Thread(target=drive)
    driver.start()
    while driver.is_alive() and journaled(out) < 3:
        time.sleep(0.01)
    cluster.remove_node(victim)  # its requests in flight are lost with it
    driver.join(300)

    assert not errors and not driver.is_alive()
    assert outcome(out) == outcome(one_process)
    nodes = json.loads((out / "summary.json").read_text())["nodes"]
    lost = sum(n["reassigned"] for n in nodes.values())
    assert lost >= 1  # the node held requests when it went
    extra = calls(doubles["edit"]) - before - generator_calls
    assert 0 <= extra <= lost * MAX_ATTEMPTS  # only the unfinished steps' attempts were made again
    assert os.path.exists(out / "report.html")
