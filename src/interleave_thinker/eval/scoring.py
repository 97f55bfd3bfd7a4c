"""What the four scoring protocols share: the run folder, resume, metadata and the summary.

A scoring run folder holds ``run.json`` (protocol, scorer version, judge: written first, checked on
every resume so two protocols or judges never mix in one folder), ``scores.jsonl`` (one line per item,
appended as items finish), ``replies.jsonl`` (every judge reply), ``judge_cache/`` and
``summary.json``. Every number carries its provenance: the summary repeats the metadata and says
plainly when the judge is not the protocol's official one.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.core.no_follow import OutputLinkError, open_append
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.redact import redact_spec
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.eval.judging import RUN_BUDGET, JudgeClient
from interleave_thinker.eval.outputs import reason
from interleave_thinker.eval.prompts import PromptSet, Repo

NOT_COMPARABLE = "not comparable to the published leaderboard"
MAX_RUN_JSON_CHARS = 1_000_000
INPUT_DIGEST = "input_sha256"
"""The key of ``scores.jsonl`` binding a score to what it judged (see :func:`score_items`)."""


@dataclass
class ItemResult:
    """One line of ``scores.jsonl``. ``status``: ok, failed (a judgement never parsed, an output refused,
    a budget spent: ``errors`` says which) or missing."""

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


NOT_VERIFIED = "the name is the server's word: which weights answered was not verified"
STAND_IN = (
    "the judge is a tiny stand-in model: it was taught only the reply format (imposed as it decodes), "
    "so these scores mean nothing; use it to try the commands offline"
)
"""The note of a ``tiny:`` judge (``tiny/formats.py``), on the console, in summary.json and on the page."""


def judge_metadata(official: str | None, spec: str, model_id: str) -> dict[str, Any]:
    """The judge as given (``--judge``) and as its server names itself, beside the protocol's official
    judge. A matching name is recorded as a matching *name*: nothing here checks which model answered."""
    matches = official is not None and (model_id == official or model_id.rsplit("/", 1)[-1] == official)
    meta: dict[str, Any] = {
        "spec": redact_spec(spec),  # run.json and summary.json: no URL credentials
        "model": model_id,
        "official_model": official,
        "name_matches_official": matches,
        "verified": False,
        "verification": NOT_VERIFIED,
    }
    if redact_spec(spec).startswith("tiny:"):
        meta["stand_in"] = True
        meta["note"] = STAND_IN
    elif official is None:
        meta["note"] = "this benchmark has no official judge: scores compare only runs judged alike"
    elif not matches:
        meta["note"] = f"judge {model_id!r} is not the protocol's official {official!r}: {NOT_COMPARABLE}"
    return meta


def run_metadata(
    protocol: str,
    scorer_version: str,
    judge: dict[str, Any],
    prompts: PromptSet,
    repo: Repo | None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "protocol": protocol,
        "scorer_version": scorer_version,
        "judge": judge,
        "official_code": {"repository": repo.name, "commit": repo.commit} if repo is not None else None,
        "prompts": {"origin": prompts.origin, "sha256": prompts.digests()},
        **extra,
    }


IDENTITY_KEYS = ("protocol", "scorer_version")


FRESH_ADVICE = (
    "rerun with --fresh-scores to score into the same folder (the old one moves aside, nothing is deleted)"
)
"""Advice that holds for both commands that score (`eval score`, `eval run`)."""


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
            try:
                old = json.loads(path.read_text(encoding="utf-8", errors="replace")[:MAX_RUN_JSON_CHARS])
            except (ValueError, RecursionError):
                old = None
            if not isinstance(old, dict):
                raise ConfigError(f"{path} is not a scoring run's metadata (unreadable JSON): {FRESH_ADVICE}")
            for key in IDENTITY_KEYS:
                if old.get(key) != self.meta.get(key):
                    raise ConfigError(
                        f"{self.out} holds a {key} {old.get(key)!r} scoring run; this one is {self.meta.get(key)!r}. "
                        f"Scores of different protocols never mix: {FRESH_ADVICE}"
                    )
            old_judge, new_judge = old.get("judge", {}), self.meta["judge"]
            if (old_judge.get("spec"), old_judge.get("model")) != (new_judge["spec"], new_judge["model"]):
                raise ConfigError(
                    f"{self.out} was scored with judge {old_judge.get('spec')!r} ({old_judge.get('model')}); "
                    f"this run uses {new_judge['spec']!r} ({new_judge['model']}): {FRESH_ADVICE}"
                )
        write_atomic(path, json.dumps(self.meta, indent=2, ensure_ascii=False) + "\n")
        self._repair_tail()

    def done(self) -> dict[str, dict[str, Any]]:
        """Lines already written (a torn last line from a kill is ignored and rescored)."""
        rows: dict[str, dict[str, Any]] = {}
        if self.scores_path.is_file():
            for line in self.scores_path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and "id" in row:
                    rows[str(row["id"])] = row
        return rows

    def append(self, result: ItemResult) -> None:
        # the data's own strings (a category, a subtask) may hold what no file can: cleaned as written
        text = clean_text(json.dumps(result.to_json(), ensure_ascii=False)) + "\n"
        with self._lock:
            self.out.mkdir(parents=True, exist_ok=True)
            with open_append(self.scores_path) as handle:
                handle.write(text)
                handle.flush()

    def _repair_tail(self) -> None:
        """A kill mid-write leaves a line without its newline: cut it so the next line starts clean."""
        if not self.scores_path.is_file():
            return
        data = self.scores_path.read_bytes()
        if data and not data.endswith(b"\n"):
            write_atomic(self.scores_path, data[: data.rfind(b"\n") + 1])

    def write_summary(
        self, summary: dict[str, Any], client: JudgeClient, order: list[str], rescored: int = 0
    ) -> dict[str, Any]:
        """``summary.json`` (metadata + results + counts + the digest of what was scored); ``scores.jsonl``
        rewritten in data order. ``rescored``: stored scores replaced because their input changed."""
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
            "failed_items": [
                {"id": r.get("id"), "reason": (r.get("errors") or ["no reason recorded"])[-1]}
                for r in ordered
                if r.get("status") == "failed"
            ],
            "scored_inputs": {"sha256": outputs_digest(ordered), "rescored_changed": rescored},
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
    digest: Callable[[Any], str] | None = None,
) -> int:
    """Score every item not yet in ``scores.jsonl`` with the same ``digest``; returns how many stored
    scores were replaced because their item's data or output changed since.

    A line is reused only when its ``input_sha256`` is the item's ``digest`` (the data record and the
    output files it judged), so a reused ``--out`` never reports another output's score. An item whose
    scoring raises fails alone: its line is ``failed`` with a one-line reason and the run goes on.
    Items run concurrently (twice ``capacity`` of them, so requests are ready when a slot frees), the
    client bounds the judge to ``capacity`` calls in flight.

    ``on_scored(done, total)`` is called once before the first judge call (``done`` = items already in
    ``scores.jsonl``) and after each item is written: the CLI's counted bar, without rich in this layer."""
    items = list(items)
    done = folder.done()
    digests = {item_id(item): digest(item) if digest is not None else None for item in items}
    todo = [item for item in items if _stale(done.get(item_id(item)), digests[item_id(item)])]
    changed = sum(1 for item in todo if item_id(item) in done)
    counter = _Counter(len(items) - len(todo), len(items), on_scored)

    def work(item: Any) -> None:
        key = item_id(item)
        try:
            result = score_one(item)
        except OutputLinkError:
            raise  # the output folder is unsafe: no item can be recorded
        except Exception as exc:  # one bad item fails alone; the run finishes and writes its summary
            where = "" if isinstance(exc, InputError) else f"{getattr(item, 'where', '') or key}: "
            failure = [clean_text(where) + reason(exc)]
            result = ItemResult(key, str(getattr(item, "category", "")), None, "failed", errors=failure)
        result.extra[INPUT_DIGEST] = digests[key]
        folder.append(result)
        counter.advance()

    with ThreadPoolExecutor(max_workers=2 * max(1, capacity), thread_name_prefix="score-item") as pool:
        for future in [pool.submit(work, item) for item in todo]:
            future.result()
    return changed


def bind(item: Any, *outputs: str) -> str:
    """An item's ``input_sha256``: its data record (``item.raw``) and the digests of its outputs."""
    record = json.dumps(getattr(item, "raw", {}), sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(json.dumps([record, list(outputs)]).encode("ascii")).hexdigest()


def _stale(row: dict[str, Any] | None, digest: str | None) -> bool:
    """Whether an item must be scored: no line, another input, or stopped by the run's call budget
    (a resume is a new run, with a new budget)."""
    if row is None or row.get(INPUT_DIGEST) != digest:
        return True
    return row.get("status") == "failed" and any(RUN_BUDGET in str(e) for e in row.get("errors") or [])


def outputs_digest(rows: Iterable[dict[str, Any]]) -> str:
    """One digest of what a summary scored: every item's id and ``input_sha256``, in order."""
    pairs = [[str(r.get("id")), r.get(INPUT_DIGEST)] for r in rows]
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=True).encode("ascii")).hexdigest()


def mean(values: Iterable[float | None]) -> float | None:
    """Mean over the defined values (NaN and None skipped, as pandas does); None when there are none."""
    kept = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(kept) / len(kept) if kept else None
