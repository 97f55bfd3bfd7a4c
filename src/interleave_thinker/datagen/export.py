"""`data export`: our run folders as the release's interleaved corpora, in the files users train with.

``out/`` receives ``images/`` (each image once, named by content hash, as `data build` names them),
``interleaved_easy.json`` or ``interleaved_hard.json`` (LLaMA-Factory ShareGPT; image paths relative
to ``out/``, so our loaders read it back), its entry in ``dataset_info.json`` (merged with the entries
already there), a ``datasets`` copy under ``trl/<name>`` (``save_to_disk``, TRL's conversational
format; none when no trajectory is kept, since an empty saved dataset does not load back) and
``<name>_stats.json``: runs read, trajectories kept, and the dropped ones per reason and by run.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import confine, write_atomic
from interleave_thinker.core.run_folder import TRACE_FILE, load_trace
from interleave_thinker.core.untrusted import MAX_JSON_BYTES, ImageLimits, UnsafeFile, is_within
from interleave_thinker.datagen.export_format import REASON_OF_KIND, Format, Interleaved, interleave
from interleave_thinker.runtime.failures import one_line
from interleave_thinker.train.data.examples import ChatTurn, SFTExample
from interleave_thinker.train.data.export import (
    ImageCopier,
    clear_folder,
    merge_dataset_info,
    relocate_sft,
    sharegpt_info,
    sharegpt_record,
)
from interleave_thinker.train.data.trajectories import find_runs
from interleave_thinker.train.data.trl_format import sft_dataset

MAX_DETAIL = 300


@dataclasses.dataclass
class ExportStats:
    """What an export read, kept and left out (the reasons are :data:`export_format.DROP_REASONS`)."""

    format: Format
    runs: int = 0
    kept: int = 0
    images: int = 0
    """Distinct image files the kept trajectories point at (inputs included)."""
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)
    dropped_runs: list[dict[str, str]] = dataclasses.field(default_factory=list)


def corpus_name(fmt: Format) -> str:
    """``interleaved-easy`` -> ``interleaved_easy``: the stem of the export's files."""
    return fmt.replace("-", "_")


def find_traces(source: Path) -> list[Path]:
    """The run folders of ``--input``: a run, a folder of runs, or a batch folder (``requests/<id>/``)."""
    if not source.is_dir():
        raise InputError(
            f"--input {source}: no such folder; pass a run folder, a folder of runs or a batch folder."
        )
    runs = find_runs(source)
    if not runs:
        raise InputError(
            f"--input {source}: found no {TRACE_FILE} in it, in its sub-folders (a folder of runs) or below "
            "them (a batch folder's requests/<id>/); pass a folder the pipeline or `batch` wrote."
        )
    return runs


def _one(run: Path, source: Path, fmt: Format, limits: ImageLimits) -> Interleaved | tuple[str, str]:
    """The run's trajectory, or (reason, detail) when it is left out: a bad run fails alone."""
    try:
        if not is_within(run, source):
            raise UnsafeFile(
                f"{run} is a symbolic link out of --input {source}; pass the run folder itself.",
                "unsafe_path",
            )
        # A newer schema raises TraceVersionError (not caught): upgrade, not skip.
        trace = load_trace(run / TRACE_FILE, max_bytes=MAX_JSON_BYTES)
        result = interleave(trace, run, fmt, limits)
    except UnsafeFile as exc:
        return REASON_OF_KIND[exc.kind], one_line(str(exc), MAX_DETAIL)
    except (OSError, ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return "unreadable", one_line(f"{run / TRACE_FILE}: {first}", MAX_DETAIL)
    return (result, "") if isinstance(result, str) else result


def read_runs(
    runs: list[Path],
    source: Path,
    fmt: Format,
    on_run: Callable[[], None] | None = None,
    limits: ImageLimits | None = None,
) -> tuple[list[tuple[str, SFTExample]], ExportStats]:
    """Each run's trajectory as a two-turn conversation keyed by the run's path below ``source``."""
    stats = ExportStats(format=fmt, runs=len(runs))
    kept: list[tuple[str, SFTExample]] = []
    reasons: Counter[str] = Counter()
    for run in runs:
        key = run.relative_to(source).as_posix() if run != source else run.name
        result = _one(run, source, fmt, limits or ImageLimits())
        if isinstance(result, Interleaved):
            turns = (ChatTurn("user", result.user), ChatTurn("assistant", result.assistant))
            kept.append((key, SFTExample(messages=turns, images=result.images)))
        else:
            reasons[result[0]] += 1
            entry = {"run": key, "reason": result[0]}
            stats.dropped_runs.append({**entry, "detail": result[1]} if result[1] else entry)
        if on_run is not None:
            on_run()
    stats.kept, stats.dropped = len(kept), dict(sorted(reasons.items()))
    return kept, stats


def _save_dataset(target: Path, examples: list[SFTExample]) -> None:
    """``save_to_disk`` into a hidden sibling, then swap it in, so no reader sees half a dataset."""
    staged, old = target.with_name(f".{target.name}.tmp"), target.with_name(f".{target.name}.old")
    for leftover in (staged, old):
        clear_folder(leftover)
    if examples:
        sft_dataset(examples).save_to_disk(str(staged))
    if target.exists() or target.is_symlink():
        target.rename(old)
    if examples:
        staged.rename(target)
    clear_folder(old)


def write_corpus(
    kept: list[tuple[str, SFTExample]], stats: ExportStats, out: Path, *, trl: bool = True
) -> list[SFTExample]:
    """Write the corpus files into ``out`` and return the examples as they now point into it."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    confine(out)
    name = corpus_name(stats.format)
    copy = ImageCopier(out)
    moved = [(key, relocate_sft(example, copy)) for key, example in kept]
    stats.images = len({p for _, example in moved for p in example.images})
    records = [{"id": key, **sharegpt_record(example, out)} for key, example in moved]
    write_atomic(out / f"{name}.json", json.dumps(records, ensure_ascii=False, indent=2) + "\n")
    merge_dataset_info(out, {f"interleave_{name}": sharegpt_info(f"{name}.json")})
    if trl:
        _save_dataset(out / "trl" / name, [example for _, example in moved])
    write_atomic(out / f"{name}_stats.json", json.dumps(dataclasses.asdict(stats), indent=2) + "\n")
    return [example for _, example in moved]


def export_corpus(
    source: Path,
    out: Path,
    fmt: Format,
    *,
    trl: bool = True,
    on_run: Callable[[], None] | None = None,
    limits: ImageLimits | None = None,
) -> ExportStats:
    """Read every run below ``source`` and write the ``fmt`` corpus into ``out``."""
    kept, stats = read_runs(find_traces(source), source, fmt, on_run, limits)
    write_corpus(kept, stats, out, trl=trl)
    return stats
