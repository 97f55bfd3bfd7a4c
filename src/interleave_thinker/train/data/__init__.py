"""Training data: loaders with validation for the release's formats, builders from our runs, exports."""

from interleave_thinker.train.data.builder import BuildResult, build
from interleave_thinker.train.data.examples import (
    ChatTurn,
    CriticRLExample,
    GroundTruth,
    PlannerRLExample,
    RecordEntry,
    SFTExample,
    TrajectoryRecord,
)
from interleave_thinker.train.data.export import export
from interleave_thinker.train.data.issues import DatasetError, Issue
from interleave_thinker.train.data.loaders import (
    load_critic_rl,
    load_kind,
    load_planner_rl,
    load_record,
    load_sft,
)
from interleave_thinker.train.data.rules import BuildRules, BuildStats, classify
from interleave_thinker.train.data.trajectories import Trajectory, discover
from interleave_thinker.train.data.trl_format import rl_dataset, sft_dataset

__all__ = [
    "BuildResult",
    "BuildRules",
    "BuildStats",
    "ChatTurn",
    "CriticRLExample",
    "DatasetError",
    "GroundTruth",
    "Issue",
    "PlannerRLExample",
    "RecordEntry",
    "SFTExample",
    "Trajectory",
    "TrajectoryRecord",
    "build",
    "classify",
    "discover",
    "export",
    "load_critic_rl",
    "load_kind",
    "load_planner_rl",
    "load_record",
    "load_sft",
    "rl_dataset",
    "sft_dataset",
]
