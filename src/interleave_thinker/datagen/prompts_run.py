"""`data prompts`: a taxonomy and a teacher model in, a balanced, de-duplicated batch input out.

1. Each sub-category is one job (``subcategory_concurrency`` jobs at once): a lexicon call, then prompt batches
   until ``per_subcategory`` distinct prompts are in hand or :data:`EXTRA_BATCHES` spare batches are
   spent. Every call is kept on disk (:mod:`~interleave_thinker.datagen.prompts_store`) and reused on
   a rerun, so a killed run continues without asking again for work already done. The tokens a reply
   carries (an OpenAI-compatible ``usage``, Gemini's ``usage_metadata``) are kept with the call and
   added up in the summary.
2. A job is a failure boundary: a call that gives no usable reply after its retries is recorded as
   failed with a one-line reason; an unexpected error fails that sub-category only.
3. Near-duplicates (:mod:`~interleave_thinker.datagen.dedupe`: word 3-shingle Jaccard >= 0.8) are
   removed over the whole output in taxonomy order (the first one is kept), then every sub-category
   keeps at most ``per_subcategory`` prompts, so none outweighs another.
4. Ids are ``<domain id>.<sub-category id>.<NNN>`` (1-based position in the sub-category): identical
   across reruns and resumes, since the order depends only on the stored replies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from interleave_thinker.agents.messages import text_part, user_turn
from interleave_thinker.agents.retry import BACKEND_ERROR_PREFIX, RetryPolicy
from interleave_thinker.backends.protocols import MAX_NEW_TOKENS, VLMBackend
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.datagen.dedupe import THRESHOLD, NearDuplicateIndex
from interleave_thinker.datagen.generate_usage import MeteredVLM, Usage
from interleave_thinker.datagen.prompts_store import (
    CallRecord,
    call_path,
    load_call,
    request_digest,
    save_call,
    stored_reply,
)
from interleave_thinker.datagen.prompts_teacher import (
    Lexicon,
    lexicon_request,
    parse_lexicon,
    parse_prompts,
    prompts_request,
    template_digests,
)
from interleave_thinker.datagen.taxonomy import Domain, Subcategory, Taxonomy
from interleave_thinker.runtime.failures import failure_reason, one_line

T = TypeVar("T")
PER_BATCH = 25
"""Most prompts asked for in one call (a longer list is more often cut by the token limit)."""
EXTRA_BATCHES = 2
"""Batches a sub-category may spend beyond the minimum, on duplicates and unusable replies."""
SUMMARY_FILE = "summary.json"
DROPPED_FILE = "dropped.jsonl"


@dataclass(frozen=True)
class PromptSettings:
    """How many prompts, which seed, how many sub-categories at once, and the teacher's turn settings."""

    per_subcategory: int = 40
    seed: int = 0
    subcategory_concurrency: int = 8
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(3, 0.8, 1.0))
    """Teacher calls per turn; sampling temperature of the first call and of the retries."""
    max_new_tokens: int = MAX_NEW_TOKENS


@dataclass
class SubResult:
    """What one sub-category's job produced: every usable prompt in reply order (near-duplicates
    included: they are removed over the whole output), failures, and calls made or reused."""

    domain: Domain
    sub: Subcategory
    prompts: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    calls: int = 0
    reused: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class PromptsSummary:
    written: int
    per_subcategory: dict[str, int]
    short: list[str]
    failures: list[str]
    dropped_near_duplicates: int
    teacher_calls: int
    replies_reused: int
    info: dict[str, Any]
    teacher_input_tokens: int = 0
    """Input tokens of this run's teacher calls, as the server reported them (0 when it reports none)."""
    teacher_output_tokens: int = 0


class TeacherJob:
    """One sub-category: ask (or reuse) the lexicon, then prompt batches, keeping every call on disk."""

    def __init__(self, teacher: VLMBackend, work_dir: Path, settings: PromptSettings) -> None:
        self.teacher, self.work_dir, self.settings = teacher, work_dir, settings

    def _call(self, result: SubResult, name: str, request: str, parse: Callable[[str], T]) -> T | None:
        path = call_path(self.work_dir, result.domain.id, result.sub.id, name)
        stored = load_call(path, request)
        if stored is not None:
            try:
                value = parse(stored.replies[-1])
                result.reused += 1
                return value
            except (ParseError, ValueError, TypeError, RecursionError):  # edited by hand: ask again
                pass
        messages = user_turn(text_part(request))
        usage = Usage()
        teacher = MeteredVLM(self.teacher, usage)
        outcome = self.settings.retry.run(
            lambda t: teacher.chat(messages, max_new_tokens=self.settings.max_new_tokens, temperature=t),
            parse,
        )
        result.calls += len(outcome.raw_replies) + sum(
            e.startswith(BACKEND_ERROR_PREFIX) for e in outcome.errors
        )
        result.input_tokens += usage["input_tokens"]
        result.output_tokens += usage["output_tokens"]
        failed = None
        if outcome.value is None:
            last = outcome.errors[-1] if outcome.errors else "no reply"
            failed = one_line(f"{name}: no usable reply after {len(outcome.errors)} attempt(s): {last}")
            result.failures.append(f"{result.domain.id}/{result.sub.id}: {failed}")
        replies = [stored_reply(reply) for reply in outcome.raw_replies]  # bounded on disk
        record = CallRecord(
            name.split("-")[0], request_digest(request), request, replies, outcome.errors, failed
        )
        record.input_tokens, record.output_tokens = usage["input_tokens"], usage["output_tokens"]
        save_call(path, record)
        return outcome.value

    def run(self, domain: Domain, sub: Subcategory) -> SubResult:
        result = SubResult(domain, sub)
        try:
            self._prompts(result)
        except Exception as exc:  # one sub-category's failure boundary: the others go on
            result.failures.append(f"{domain.id}/{sub.id}: {failure_reason(exc)}")
        return result

    def _prompts(self, result: SubResult) -> None:
        lexicon: Lexicon | None = self._call(
            result, "lexicon", lexicon_request(result.domain, result.sub), parse_lexicon
        )
        if lexicon is None:
            return
        wanted = self.settings.per_subcategory
        index = NearDuplicateIndex()  # only to know how many distinct prompts are in hand
        distinct = 0
        batches = math.ceil(wanted / PER_BATCH) + EXTRA_BATCHES
        for batch in range(1, batches + 1):
            if distinct >= wanted:
                break
            count = min(PER_BATCH, wanted - distinct)
            request = prompts_request(
                result.domain, result.sub, lexicon, count=count, batch=batch, seed=self.settings.seed
            )
            for text in self._call(result, f"prompts-{batch:03d}", request, parse_prompts) or []:
                result.prompts.append(text)
                distinct += index.add(str(len(result.prompts)), text) is None


def _select(results: list[SubResult], wanted: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The output records (near-duplicates removed over everything, at most ``wanted`` per
    sub-category) and the dropped near-duplicates, each naming the prompt it repeats."""
    index = NearDuplicateIndex()
    kept_text: dict[str, str] = {}
    records: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for result in results:
        count = 0
        for position, text in enumerate(result.prompts):
            key = f"{result.domain.id}.{result.sub.id}#{position}"
            duplicate = index.add(key, text)
            if duplicate is not None:
                dropped.append(
                    {
                        "prompt": text,
                        "domain": result.domain.id,
                        "subcategory": result.sub.id,
                        "duplicate_of": kept_text[duplicate],
                    }
                )
                continue
            kept_text[key] = text
            if count < wanted:
                count += 1
                item_id = f"{result.domain.id}.{result.sub.id}.{count:03d}"
                records.append(
                    {"id": item_id, "prompt": text, "domain": result.domain.id, "subcategory": result.sub.id}
                )
    return records, dropped


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_prompts(
    taxonomy: Taxonomy,
    teacher: VLMBackend,
    out: Path,
    work_dir: Path,
    settings: PromptSettings,
    *,
    info: dict[str, Any] | None = None,
    on_done: Callable[[SubResult], None] | None = None,
) -> PromptsSummary:
    """Run every sub-category's job, then write ``out`` (JSONL, the batch input format) and, in
    ``work_dir``, the dropped near-duplicates and ``summary.json``."""
    job = TeacherJob(teacher, work_dir, settings)
    pairs = taxonomy.pairs()
    results: dict[int, SubResult] = {}
    pool = ThreadPoolExecutor(max_workers=settings.subcategory_concurrency, thread_name_prefix="data-prompts")
    try:
        futures = {pool.submit(job.run, domain, sub): i for i, (domain, sub) in enumerate(pairs)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_done is not None:
                on_done(results[futures[future]])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    ordered = [results[i] for i in range(len(pairs))]
    records, dropped = _select(ordered, settings.per_subcategory)
    write_atomic(out, _jsonl(records))
    write_atomic(work_dir / DROPPED_FILE, _jsonl(dropped))
    summary = _summary(ordered, records, dropped, settings, info or {})
    write_atomic(work_dir / SUMMARY_FILE, json.dumps(summary.__dict__, ensure_ascii=False, indent=2) + "\n")
    return summary


def _summary(
    results: list[SubResult],
    records: list[dict[str, Any]],
    dropped: list[dict[str, Any]],
    settings: PromptSettings,
    info: dict[str, Any],
) -> PromptsSummary:
    counts = {f"{r.domain.id}/{r.sub.id}": 0 for r in results}
    for record in records:
        counts[f"{record['domain']}/{record['subcategory']}"] += 1
    return PromptsSummary(
        written=len(records),
        per_subcategory=counts,
        short=[name for name, n in counts.items() if n < settings.per_subcategory],
        failures=[f for r in results for f in r.failures],
        dropped_near_duplicates=len(dropped),
        teacher_calls=sum(r.calls for r in results),
        replies_reused=sum(r.reused for r in results),
        teacher_input_tokens=sum(r.input_tokens for r in results),
        teacher_output_tokens=sum(r.output_tokens for r in results),
        info={
            **info,
            "near_duplicates": f"word 3-shingle Jaccard >= {THRESHOLD}",
            "per_subcategory": settings.per_subcategory,
            "seed": settings.seed,
            "templates_sha256": template_digests(),
        },
    )
