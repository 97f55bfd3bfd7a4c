"""The consistency scorers, by name: the VLM judge with our rubric, and offline ones that need no model.

``eval score consistency --scorer NAME``: ``vlm`` (the default) is the ``consistency`` protocol of
:mod:`interleave_thinker.eval.benchmarks.consistency.protocol`, a judge spec given with ``--judge``; every other
name here is an offline scorer run on this machine over the same sequences (the shown sequence of each
run folder, read by :func:`interleave_thinker.eval.benchmarks.consistency.scorer.read_sequence`), writing
``scores.jsonl`` and ``summary.json`` in the same shape (pairs 0-10, sequence = mean of its pairs,
overall and category = mean over sequences) with the scorer's provenance in place of the judge's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

import interleave_thinker.eval.benchmarks.consistency.scorer as scs
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR
from interleave_thinker.core.untrusted import open_image
from interleave_thinker.eval.benchmarks.consistency.protocol import NAME as PROTOCOL
from interleave_thinker.eval.scoring import mean

VLM = "vlm"
SCORES_FILE = "scores.jsonl"
SUMMARY_FILE = "summary.json"


class OfflineScorer(Protocol):
    """A scorer that rates consecutive pictures without a model server."""

    name: str

    def pairs(self, images: list[Image.Image]) -> list[float]: ...

    def provenance(self) -> dict[str, Any]: ...


def _perceptual() -> OfflineScorer:
    from interleave_thinker.eval.perceptual import PerceptualScorer

    return PerceptualScorer()


SCORERS: dict[str, Callable[[], OfflineScorer] | None] = {VLM: None, "perceptual": _perceptual}
"""Name -> factory of an offline scorer; ``None`` marks the VLM judge (the protocol, ``--judge``)."""


def offline_scorer(name: str) -> OfflineScorer:
    factory = SCORERS.get(name)
    if factory is None:
        offline = [n for n, f in SCORERS.items() if f is not None]
        raise ConfigError(
            f"--scorer {name!r} is not an offline scorer; use {', '.join(offline)} (or vlm with --judge)."
        )
    return factory()


def _sequence_row(scorer: OfflineScorer, outputs: Path, item_id: str, category: str) -> dict[str, Any]:
    try:
        sequence = scs.read_sequence(outputs, item_id)
    except scs.Missing as exc:
        return {"id": item_id, "category": category, "score": None, "status": "missing", "errors": [str(exc)]}
    except InputError as exc:
        return {"id": item_id, "category": category, "score": None, "status": "failed", "errors": [str(exc)]}
    images = [open_image(path, what=f"{item_id} step {position}") for position, _, path in sequence.steps]
    scores = scorer.pairs(images)
    pairs: list[dict[str, Any]] = [
        {
            "pair": i + 1,
            "steps": [a[0], b[0]],
            "images": [a[2].name, b[2].name],  # the shown images (a repair's), as read
            "score": s,
        }
        for i, (a, b, s) in enumerate(zip(sequence.steps, sequence.steps[1:], scores, strict=False))
    ]
    lowest = min(range(len(scores)), key=lambda i: (scores[i], i))
    return {
        "id": item_id,
        "category": category,
        "score": mean(scores),
        "status": "ok",
        "lowest_pair": {"steps": pairs[lowest]["steps"], "score": scores[lowest]},
        "pairs": pairs,
    }


def score_runs(outputs: Path, out: Path, scorer: OfflineScorer) -> dict[str, Any]:
    """Every run folder under ``outputs`` scored by ``scorer``; writes ``out/scores.jsonl`` and ``summary.json``."""
    items = scs.load_runs(scs.runs_root(outputs), PROTOCOL)
    rows = [_sequence_row(scorer, outputs, item.id, item.category) for item in items]
    judged = [r for r in rows if r["status"] == "ok"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in judged:
        groups.setdefault(str(row["category"] or scs.UNCATEGORISED), []).append(row)

    def block(group: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "score": mean(r["score"] for r in group),
            "n": len(group),
            "pairs": sum(len(r["pairs"]) for r in group),
        }

    summary = {
        "protocol": PROTOCOL,
        "scorer": scorer.provenance(),
        "judge": {"spec": f"offline:{scorer.name}", "model": None, "verification": "no model: computed here"},
        "overall": block(judged),
        "categories": {name: block(group) for name, group in groups.items()},
        "scale": "0-10",
        "aggregation": "sequence = mean of its pair scores; overall and category = mean over sequences",
        "counts": {
            "items": len(rows),
            "scored": len(judged),
            "failed": sum(r["status"] == "failed" for r in rows),
            "missing_outputs": sum(r["status"] == "missing" for r in rows),
        },
        "outputs": str(outputs),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / SCORES_FILE, "".join(json.dumps(r) + "\n" for r in rows))
    write_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


__all__ = ["IMAGES_DIR", "SCORERS", "VLM", "OfflineScorer", "offline_scorer", "score_runs"]
