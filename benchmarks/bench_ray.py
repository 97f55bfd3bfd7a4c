"""`batch --ray` on one node and on three: throughput side by side, and the driver's own cost.

One Ray cluster on this machine (``ray.cluster_utils.Cluster``, every node on 127.0.0.1) starts with
one node; the batch runs on it, two more nodes join, and the same batch runs again into a new folder.
What bounds a node is its capacity, as on GPU nodes: each node's worker may have ``--per-backend-limit
generator=L`` calls in flight, and the generator double answers after a GPU-like latency scaled down
(``--latency``, default 0.5 s; planner and critic 0.02 s). The doubles are threaded HTTP servers on
127.0.0.1 in this process, so three nodes can keep three times the generator calls in flight.

Printed: per row the nodes, workers, the start-up (connecting, the workers loading; not part of the
throughput), the run's wall time and requests/s, the generator calls and the most in flight; the
3-node/1-node throughput ratio (goal >= 2.5); the driver's CPU time per request (its main thread's:
the doubles run in other threads of this process, Ray's own in its C++ threads), and whether both
runs' results.json agree.
Run: python benchmarks/bench_ray.py [--requests 60] [--latency 0.5] [--limit 4]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: loopback only

import ray
from ray.cluster_utils import Cluster

from interleave_thinker.cli.main import app
from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.counting import Counting
from interleave_thinker.testing.doubles.server import LocalServer

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "node_ip_address": "127.0.0.1"}


def run(folder: Path, address: str, urls: dict[str, str], requests: int, limit: int) -> tuple[float, float]:
    """One batch on the cluster: (wall seconds, driver CPU seconds)."""
    source = folder / "in.jsonl"
    rows = (json.dumps({"id": f"r{i:03d}", "prompt": f"Show process number {i}"}) for i in range(requests))
    source.write_text("".join(row + "\n" for row in rows))
    chat = f"openai:{urls['chat']}/v1#scripted"
    args = [
        *("batch", "--input", str(source), "--out", str(folder / "out"), "--preset", "tiny", "--quiet"),
        *("--planner", chat, "--critic", chat, "--generator", f"http:{urls['edit']}", "--max-attempts", "2"),
        *("--concurrency", str(2 * limit), "--per-backend-limit", f"generator={limit}", "--ray", address),
    ]
    wall, cpu = time.perf_counter(), time.thread_time()
    app(args, standalone_mode=False)
    return time.perf_counter() - wall, time.thread_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--latency", type=float, default=0.5, help="generator seconds a call")
    parser.add_argument("--limit", type=int, default=4, help="generator calls in flight per node")
    opts = parser.parse_args()

    scripted_models.LATENCY = 0.02
    edit = Counting(scripted_models.handler("edit", scripted_models.State()), hold=opts.latency)
    servers = {
        "chat": LocalServer(scripted_models.handler("chat", scripted_models.State())).start(),
        "edit": LocalServer(edit).start(),
    }
    urls = {kind: server.url for kind, server in servers.items()}
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    rows = []
    try:
        ray.init(address=cluster.address, logging_level="WARNING")
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
            for nodes in (1, 3):
                while len(cluster.list_all_nodes()) < nodes:
                    cluster.add_node(**NODE)
                cluster.wait_for_nodes()
                folder = Path(tmp) / f"nodes{nodes}"
                folder.mkdir()
                calls, peak = edit.calls, 0
                edit.peak = 0
                wall, cpu = run(folder, cluster.address, urls, opts.requests, opts.limit)
                peak = edit.peak
                summary = json.loads((folder / "out" / "summary.json").read_text())
                results = (folder / "out" / "results.json").read_text()
                rows.append((nodes, summary, wall, cpu, edit.calls - calls, peak, results))
    finally:
        ray.shutdown()
        cluster.shutdown()
        for server in servers.values():
            server.close()

    print(f"requests {opts.requests}, generator {opts.latency:.2f} s a call, limit {opts.limit} per node")
    print(
        "| nodes | workers | start-up s | run s | requests/s | generator calls | most in flight "
        "| driver CPU ms/request |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for nodes, summary, wall, cpu, calls, peak, _ in rows:
        workers = sum(n["workers"] for n in summary["nodes"].values())
        run_s = summary["wall_s"]
        print(
            f"| {nodes} | {workers} | {wall - run_s:.1f} | {run_s:.1f} | {opts.requests / run_s:.2f} | {calls} "
            f"| {peak} | {1000 * cpu / opts.requests:.1f} |"
        )
    ratio = rows[0][1]["wall_s"] / rows[1][1]["wall_s"]
    print(f"3-node / 1-node throughput: {ratio:.2f}x (goal >= 2.5x)")
    print(f"results.json equal: {rows[0][6] == rows[1][6]}")


if __name__ == "__main__":
    main()
