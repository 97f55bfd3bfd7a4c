"""Published numbers shown beside measured ones in ``eval report``: facts, each with its source.

Only headline numbers are listed (the paper gives no per-category numbers we could cite). They are
reference points, not comparisons: a measured run matches them only with the same checkpoints, generator
settings, judge and protocol version (docs/evaluation.md says which).
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "InterleaveThinker paper (2026), headline table"
WISE_BOTH = ("wise", "wise-legacy")
WISE_METRIC = "WISE overall (which WISE protocol the paper used is not stated in our sources)"


@dataclass(frozen=True)
class Published:
    protocols: tuple[str, ...]
    system: str
    metric: str
    value: str
    source: str


PUBLISHED: tuple[Published, ...] = (
    Published(("ueval",), "FLUX.2-klein alone", "UEval average", "18.2", PAPER),
    Published(("ueval",), "InterleaveThinker + FLUX.2-klein", "UEval average", "66.3", PAPER),
    Published(WISE_BOTH, "FLUX.2-klein (4 steps) alone", WISE_METRIC, "0.47", PAPER),
    Published(WISE_BOTH, "InterleaveThinker + FLUX.2-klein (4 steps)", WISE_METRIC, "0.73", PAPER),
    Published(("rise",), "FLUX.2-klein (4 steps) alone", "RISEBench accuracy", "13.3%", PAPER),
    Published(("rise",), "InterleaveThinker + FLUX.2-klein (4 steps)", "RISEBench accuracy", "28.9%", PAPER),
    Published(
        ("wise-legacy",),
        "Qwen-Image, judged by gpt-4o-2024-05-13",
        "WiScore overall",
        "0.62",
        "WISE legacy leaderboard (PKU-YuanGroup/WISE); with the undated 'gpt-4o' judge the same images give 0.54",
    ),
)
