"""What the four scoring protocols share: the run folder, resume, metadata and the summary.

A scoring run folder holds ``run.json`` (protocol, scorer version, judge: written first, checked on
every resume so two protocols or judges never mix in one folder), ``scores.jsonl`` (one line per item,
appended as items finish), ``replies.jsonl`` (every judge reply), ``judge_cache/`` and
``summary.json``. Every number carries its provenance: the summary repeats the metadata and says
plainly when the judge is not the protocol's official one.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.redact import redact_spec
from interleave_thinker.eval.judging import JudgeClient
from interleave_thinker.eval.prompts import PromptSet, Repo

PROTOCOLS = ("ueval", "wise", "wise-legacy", "rise")
OFFICIAL_JUDGES = {
    "wise": "Qwen3.5-35B-A3B",
    "wise-legacy": "gpt-4o-2024-05-13",
    "rise": "gpt-4.1-2025-04-14",
    "ueval": "gemini-2.5-pro",
}
NOT_COMPARABLE = "not comparable to the published leaderboard"


@dataclass
class ItemResult:
    """One line of ``scores.jsonl``. ``status``: ok, failed (a judgement never parsed) or missing."""

    id: str
    category: str
    score: float | None
    status: str
    dimensions: dict[str, Any] = field(default_factory=dict)
    replies: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        line = {"id": self.id, "category": self.category, **self.dimensions, "score": self.score}
        line.update({"status": self.status, **self.extra, "replies": self.replies, "errors": self.errors})
        return line


def judge_metadata(protocol: str, spec: str, model_id: str) -> dict[str, Any]:
    official = OFFICIAL_JUDGES[protocol]
    is_official = model_id == official or model_id.rsplit("/", 1)[-1] == official
    meta: dict[str, Any] = {
        "spec": redact_spec(spec),  # run.json and summary.json: no URL credentials
        "model": model_id,
        "official_model": official,
        "official": is_official,
    }
    if not is_official:
        meta["note"] = f"judge {model_id!r} is not the protocol's official {official!r}: {NOT_COMPARABLE}"
    return meta


def run_metadata(
    protocol: str, scorer_version: str, judge: dict[str, Any], prompts: PromptSet, repo: Repo, **extra: Any
) -> dict[str, Any]:
    return {
        "protocol": protocol,
        "scorer_version": scorer_version,
        "judge": judge,
        "official_code": {"repository": repo.name, "commit": repo.commit},
        "prompts": {"origin": prompts.origin, "sha256": prompts.digests()},
        **extra,
    }


IDENTITY_KEYS = ("protocol", "scorer_version")


class RunFolder:
    """The scoring output folder: refuses to mix protocols, versions or judges; knows what is done."""

    def __init__(self, out: Path, meta: dict[str, Any]) -> None:
        self.out = out
        self.meta = meta
        self.scores_path = out / "scores.jsonl"
        self._lock = threading.Lock()
        self._check_identity()

    def _check_identity(self) -> None:
        path = self.out / "run.json"
        if path.is_file():
            old = json.loads(path.read_text(encoding="utf-8"))
            for key in IDENTITY_KEYS:
                if old.get(key) != self.meta.get(key):
                    raise ConfigError(
                        f"{self.out} holds a {key} {old.get(key)!r} scoring run; this one is {self.meta.get(key)!r}. "
                        "Scores of different protocols never mix: pick another --out."
                    )
            old_judge, new_judge = old.get("judge", {}), self.meta["judge"]
            if (old_judge.get("spec"), old_judge.get("model")) != (new_judge["spec"], new_judge["model"]):
                raise ConfigError(
                    f"{self.out} was scored with judge {old_judge.get('spec')!r} ({old_judge.get('model')}); "
                    f"this run uses {new_judge['spec']!r} ({new_judge['model']}). Pick another --out."
                )
        write_atomic(path, json.dumps(self.meta, indent=2, ensure_ascii=False) + "\n")
        self._repair_tail()

    def done(self) -> dict[str, dict[str, Any]]:
        """Lines already written (a torn last line from a kill is ignored and rescored)."""
        rows: dict[str, dict[str, Any]] = {}
        if self.scores_path.is_file():
            for line in self.scores_path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and "id" in row:
                    rows[str(row["id"])] = row
        return rows

    def append(self, result: ItemResult) -> None:
        text = json.dumps(result.to_json(), ensure_ascii=False) + "\n"
        with self._lock:
            self.out.mkdir(parents=True, exist_ok=True)
            with self.scores_path.open("a", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()

    def _repair_tail(self) -> None:
        """A kill mid-write leaves a line without its newline: cut it so the next line starts clean."""
        if not self.scores_path.is_file():
            return
        data = self.scores_path.read_bytes()
        if data and not data.endswith(b"\n"):
            write_atomic(self.scores_path, data[: data.rfind(b"\n") + 1])

    def write_summary(self, summary: dict[str, Any], client: JudgeClient, order: list[str]) -> dict[str, Any]:
        """``summary.json`` (metadata + results + counts); ``scores.jsonl`` rewritten in data order."""
        rows = self.done()
        ordered = [rows[i] for i in order if i in rows]
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ordered)
        write_atomic(self.scores_path, lines)
        statuses = [r.get("status") for r in ordered]
        full = {
            **self.meta,
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "counts": {
                "items": len(order),
                "scored": statuses.count("ok"),
                "failed": statuses.count("failed"),
                "missing_outputs": statuses.count("missing"),
            },
            "judge_calls": {"this_run": client.calls, "cache_hits": client.cache_hits},
            **summary,
        }
        write_atomic(self.out / "summary.json", json.dumps(full, indent=2, ensure_ascii=False) + "\n")
        return full


ScoredHook = Callable[[int, int], None]
"""``(items scored so far, items in all)``."""


class _Counter:
    """Items scored so far, reported through the hook under a lock (items finish on many threads)."""

    def __init__(self, done: int, total: int, hook: ScoredHook | None) -> None:
        self._done, self._total, self._hook = done, total, hook
        self._lock = threading.Lock()
        if hook is not None:
            hook(done, total)

    def advance(self) -> None:
        with self._lock:
            self._done += 1
            if self._hook is not None:
                self._hook(self._done, self._total)


def score_items(
    items: Iterable[Any],
    item_id: Callable[[Any], str],
    score_one: Callable[[Any], ItemResult],
    folder: RunFolder,
    capacity: int,
    on_scored: ScoredHook | None = None,
) -> None:
    """Score every item not yet in ``scores.jsonl``; items run concurrently (twice ``capacity`` of them, so
    requests are ready when a slot frees), the client bounds the judge to ``capacity`` calls in flight.

    ``on_scored(done, total)`` is called once before the first judge call (``done`` = items already in
    ``scores.jsonl``) and after each item is written: the CLI's counted bar, without rich in this layer."""
    items = list(items)
    done = folder.done()
    todo = [item for item in items if item_id(item) not in done]
    counter = _Counter(len(items) - len(todo), len(items), on_scored)

    def work(item: Any) -> None:
        folder.append(score_one(item))
        counter.advance()

    with ThreadPoolExecutor(max_workers=2 * max(1, capacity), thread_name_prefix="score-item") as pool:
        for future in [pool.submit(work, item) for item in todo]:
            future.result()


def mean(values: Iterable[float | None]) -> float | None:
    """Mean over the defined values (NaN and None skipped, as pandas does); None when there are none."""
    kept = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(kept) / len(kept) if kept else None
