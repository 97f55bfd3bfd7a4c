"""The scale rows of ``bench_scheduler.py``: thousands of requests against served backends.

The backends are ``benchmarks/_served.py`` (its own process: its CPU is not the batch's) over real HTTP
on 127.0.0.1; the batch runs in a fresh interpreter per row (``python _scale.py child ...``), so its peak
RSS (``VmHWM``), thread count and CPU time are the batch's alone. Figures per row:

- wall: from the first backend call's start to the last one's end (the server's clock), against the
  longest request chain (planner + every generator and critic call of the slowest request, at the
  served latencies): ``chain / wall`` is 1.0 when nothing but the backends' latency holds requests up;
- peak RSS of the batch process, peak ``threading.active_count()`` (sampled every 20 ms);
- orchestration CPU per backend call: the batch process's user + system CPU seconds while the batch
  ran, divided by the backend calls the server answered;
- what one file write costs in the run folder's file system right before the row (:func:`write_cost_ms`):
  the batch writes about one file per backend call, fsynced, and on this VM's ext4 the kernel CPU of
  creating a file swings from 0.02 to 0.7 ms with what the disk did just before (a burst of deletions; a
  create right after an fsync costs most, docs/notes/scale.md). A row's run folder holds ~10,000 files, so
  the rows' folders are all removed at the end, not one by one, or each row would pay for the deletions
  of the row before it. That CPU is counted in the batch's and competes with its loop
  for the cores; ``--run-dir`` puts the run folders elsewhere (e.g. a tmpfs).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
GOALS = {"ratio": 0.9, "rss_mb": 1536.0, "cpu_ms": 2.0}


@dataclass(frozen=True)
class Row:
    requests: int
    concurrency: int
    planner: float
    critic: float
    generator: float
    shards: int = 1
    """Batch processes sharing the row, as ``batch --shard I/N`` would split it (each its own loop)."""

    def latency(self, role: str) -> float:
        return float(getattr(self, role))


class Served:
    """``with Served(row) as url:`` runs ``_served.py`` with the row's latencies in its own process."""

    def __init__(self, row: Row) -> None:
        args = [str(v) for v in (row.planner, row.critic, row.generator)]
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "_served.py"), *args], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline().split()[1])
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/stats", timeout=1).raise_for_status()
                return self.url
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"{HERE / '_served.py'} did not answer on {self.url}")

    def cpu_s(self) -> float:
        """The server process's user + system CPU seconds so far: on a machine that also runs the batch,
        the doubles' own work competes with it for the cores (real engines run on machines of their own)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(10)


def pipeline_config(url: str, concurrency: int) -> dict[str, Any]:
    return {
        "planner": f"openai:{url}/v1#planner",
        "critic": f"openai:{url}/v1#critic",
        "generator": f"vllm-omni:{url}#sim-generator",
        "generation": {"width": 64, "height": 64, "steps": 2, "guidance": 1.0},
        "remote": {"concurrency": concurrency, "timeout": 600.0},
    }


def longest_chain(traces: dict[str, Any], row: Row) -> float:
    """The slowest request's own chain of calls at the served latencies (no waiting for slots)."""
    longest = 0.0
    for trace in traces.values():
        planner_calls = max(1, len(trace.planner.raw_replies))
        attempts = [a for s in trace.steps for a in s.attempts]
        critic_calls = sum(len(a.critic_raw) for a in attempts if a.critic_called)
        chain = planner_calls * row.planner + len(attempts) * row.generator + critic_calls * row.critic
        longest = max(longest, chain)
    return longest


def peak_threads(stop: threading.Event, seen: list[int], cpu: dict[int, tuple[str, float]]) -> None:
    """The most threads alive at once, and each thread's last CPU reading (threads may end before us)."""
    tick, rounds = os.sysconf("SC_CLK_TCK"), 0
    while not stop.wait(0.02):
        seen[0] = max(seen[0], threading.active_count())
        rounds += 1
        if rounds % 25:  # CPU per thread twice a second: reading /proc for every thread costs CPU too
            continue
        for thread in threading.enumerate():
            try:
                stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            name = re.sub(r"[_-]?\d+(_\d+)?$", "", thread.name)
            cpu[thread.native_id or 0] = (name, (int(fields[11]) + int(fields[12])) / tick)


def write_cost_ms(run_dir: str, files: int = 300) -> float:
    """CPU ms per file of the batch's own write (``write_atomic``: create, write 4 KB, fsync, rename) in a
    fresh folder under ``run_dir``, removed after."""
    from interleave_thinker.core.paths import write_atomic

    with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
        start = time.thread_time()
        for i in range(files):
            write_atomic(Path(tmp) / f"r{i // 10}" / f"f{i % 10}", b"x" * 4096)
        return (time.thread_time() - start) / files * 1000


def run_batch(
    row: Row, url: str, profile: str | None, shard: tuple[int, int] = (0, 1), run_dir: str | None = None
) -> dict[str, Any]:
    """One batch in this process (every ``count``-th request from ``index``); returns its figures (the
    child's half of a row; ``row.concurrency`` is this process's share)."""
    from interleave_thinker import Pipeline, PipelineConfig
    from interleave_thinker.runtime.batch_inputs import BatchItem
    from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
    from interleave_thinker.runtime.store import RunStore

    config = PipelineConfig.model_validate(pipeline_config(url, row.concurrency))
    index, count = shard
    items = [BatchItem(f"r{i:05d}", f"Show the steps of process {i}") for i in range(row.requests)]
    items = items[index::count]
    limits = dict.fromkeys(("planner", "critic", "generator"), row.concurrency)
    seen, stop = [threading.active_count()], threading.Event()
    per_thread: dict[int, tuple[str, float]] = {}
    sampler = threading.Thread(target=peak_threads, args=(stop, seen, per_thread), daemon=True)
    sampler.start()
    with contextlib.ExitStack() as stack, Pipeline.from_config(config) as pipe:
        # a folder of its own under ``run_dir``, left to whoever owns that (removed with it, after the
        # rows); without one, a temporary folder removed here
        tmp = tempfile.mkdtemp(dir=run_dir) if run_dir else stack.enter_context(tempfile.TemporaryDirectory())
        store = RunStore(Path(tmp))
        runner = BatchRunner(pipe, store, BatchSettings(concurrency=row.concurrency, limits=limits))
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        outcome = Profiles(runner).run(runner, items, profile) if profile else runner.run(items)
        after = resource.getrusage(resource.RUSAGE_SELF)
        stop.set()
        chain = longest_chain(store.traces(), row)
        statuses = sorted(set(outcome.finished.values()))
    peak_kb = int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))  # type: ignore[union-attr]
    cpu_s = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    by_name: dict[str, float] = {}
    for name, seconds in per_thread.values():
        by_name[name] = by_name.get(name, 0.0) + seconds
    return {
        "thread_cpu_s": by_name,
        "chain": chain,
        "rss_mb": peak_kb / 1024,
        "threads": seen[0],
        "cpu_s": cpu_s,
        "statuses": statuses,
    }


class Profiles:
    """cProfile sees one thread: the loop's (where a greenlet scheduler runs every request), plus one
    profiler per worker thread when the scheduler runs requests in threads; merged at the end."""

    def __init__(self, runner: Any) -> None:
        import cProfile

        self.main = cProfile.Profile()
        self.profiles = [self.main]
        self.lock = threading.Lock()
        run_one = runner._run_one

        def profiled(item: Any) -> str:
            if threading.current_thread() is threading.main_thread():
                return str(run_one(item))
            profiler = cProfile.Profile()
            with self.lock:
                self.profiles.append(profiler)
            return str(profiler.runcall(run_one, item))

        runner._run_one = profiled

    def run(self, runner: Any, items: list[Any], path: str) -> Any:
        import pstats

        outcome = self.main.runcall(runner.run, items)
        stats = pstats.Stats(self.profiles[0])
        for profile in self.profiles[1:]:
            stats.add(profile)
        stats.dump_stats(path)
        return outcome


def measure(row: Row, profile: str | None = None, run_dir: str | None = None) -> dict[str, Any]:
    """A row: the server, then the batch in fresh interpreters (one per shard, all at once); the figures
    of both halves, summed over the shards (CPU) or their most (chain, RSS, threads). The batches' run
    folders go under ``run_dir``, which the caller removes (default: a temporary folder removed here)."""
    if run_dir is not None:
        return _measure(row, profile, run_dir)
    with tempfile.TemporaryDirectory() as own:
        return _measure(row, profile, own)


def _measure(row: Row, profile: str | None, run_dir: str) -> dict[str, Any]:
    write_ms = write_cost_ms(run_dir)
    served = Served(row)
    with served as url:
        server_cpu = served.cpu_s()
        share = max(1, row.concurrency // row.shards)
        fields = [str(v) for v in (row.requests, share, row.planner, row.critic, row.generator)]
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__)),
                    "child",
                    url,
                    *fields,
                    profile or "",
                    f"{i}/{row.shards}",
                    run_dir,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(row.shards)
        ]
        parts = []
        for child in children:
            out, err = child.communicate()
            if child.returncode != 0:
                for other in children:  # no shard left running against a server about to stop
                    other.kill()
                sys.exit(err[-3000:])
            parts.append(json.loads(out.strip().splitlines()[-1]))
        server = httpx.get(f"{url}/stats", timeout=10).json()
        server_cpu = served.cpu_s() - server_cpu
    calls = sum(server["calls"].values())
    by_thread: dict[str, float] = {}
    for part in parts:
        for name, seconds in part["thread_cpu_s"].items():
            by_thread[name] = by_thread.get(name, 0.0) + seconds
    cpu_s = sum(p["cpu_s"] for p in parts)
    return {
        "thread_cpu_s": by_thread,
        "chain": max(p["chain"] for p in parts),
        "rss_mb": max(p["rss_mb"] for p in parts),
        "threads": max(p["threads"] for p in parts),
        "cpu_s": cpu_s,
        "statuses": sorted({s for p in parts for s in p["statuses"]}),
        "wall": server["last"] - server["first"],
        "calls": server["calls"],
        "in_flight": server["peak"],
        "cpu_ms": cpu_s / max(1, calls) * 1000,
        "server_cpu_s": server_cpu,
        "server_http": server.get("http", "?"),
        "write_ms": write_ms,
        "run_dir": run_dir,
    }


def report(row: Row, f: dict[str, Any]) -> None:
    """The row's figures, each beside its goal."""
    title = f"{row.requests} requests at concurrency {row.concurrency}"
    if row.shards > 1:
        title += f" in {row.shards} batch processes (RSS and threads: the largest one; CPU: their sum)"
    print(
        f"    {title}, latencies planner {row.planner} s / critic {row.critic} s / generator {row.generator} s"
    )
    print(f"      calls {f['calls']}, at most {f['in_flight']} in flight, statuses {f['statuses']}")
    ratio = f["chain"] / f["wall"] if f["wall"] else 0.0
    print(f"      {'':26}{'measured':>12}{'goal':>12}{'met by':>8}")
    print(f"      {'longest chain / wall':26}{ratio:>12.2f}{'>= 0.9':>12}{ratio / GOALS['ratio']:>8.2f}")
    spans = f"{f['chain']:.1f} / {f['wall']:.1f}"
    print(f"      {'  (chain s / wall s)':26}{spans:>12}")
    rss = f["rss_mb"]
    print(f"      {'peak RSS MB':26}{rss:>12.0f}{'< 1536':>12}{GOALS['rss_mb'] / rss:>8.2f}")
    print(f"      {'peak threads':26}{f['threads']:>12d}")
    cpu = f["cpu_ms"]
    print(f"      {'CPU ms per backend call':26}{cpu:>12.2f}{'<= 2':>12}{GOALS['cpu_ms'] / cpu:>8.2f}")
    print(f"      {'  (CPU s of the batch)':26}{f['cpu_s']:>12.1f}")
    parser = f"   HTTP parser {f['server_http']}" + (
        "" if f["server_http"] == "httptools" else " (pip install -e '.[bench]')"
    )
    print(f"      {'  (CPU s of the doubles)':26}{f['server_cpu_s']:>12.1f}{parser}")
    print(f"      {'  (ms CPU per file write)':26}{f['write_ms']:>12.3f}   in {f['run_dir']}, before the row")
    threads = sorted(f.get("thread_cpu_s", {}).items(), key=lambda kv: -kv[1])
    print(
        "        by thread (CPU s since start): " + ", ".join(f"{n} {s:.1f}" for n, s in threads if s >= 0.05)
    )


def child(argv: list[str]) -> None:
    url, requests, concurrency, planner, critic, generator, profile, shard, run_dir = argv
    row = Row(int(requests), int(concurrency), float(planner), float(critic), float(generator))
    index, count = (int(n) for n in shard.split("/"))
    figures = run_batch(row, url, f"{profile}.{index}" if profile else None, (index, count), run_dir)
    print(json.dumps(figures))


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2:])
