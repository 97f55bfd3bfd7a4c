"""Published numbers shown beside measured ones in ``eval report``: facts, each with its source.

Each benchmark module lists its own (only headline numbers: the paper gives no per-category numbers we
could cite). They are reference points, not comparisons: a measured run matches them only with the same
checkpoints, generator settings, judge and protocol version (docs/evaluation.md says which).
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "InterleaveThinker paper (2026), headline table"


@dataclass(frozen=True)
class Published:
    protocols: tuple[str, ...]
    system: str
    metric: str
    value: str
    source: str
