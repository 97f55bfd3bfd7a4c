"""The order and grouping of tests for ``make unit`` (two xdist workers, ``--dist loadgroup``).

Why: on two cores the suite's wall time is the longer worker's, and xdist hands out work in collection
order. The longest work goes first (largest first is close to the best split of a few long jobs), so no
long test starts last while the other worker idles. Every test of a file shares one xdist group, so a
module fixture (servers, a trained model, a generated dataset) is built once, on one worker; a single
test named in :data:`FIRST`, and every test of a file in :data:`SPREAD`, is a unit of its own that either
worker may take. The figures behind :data:`FIRST` are in docs/notes/test-suite.md; a file missing from
it only runs later.
"""

from __future__ import annotations

import pytest
from _pytest.nodeid import NodeId

FIRST = (
    "tests/train/test_grpo.py::test_grpo_raises_held_out_accuracy_on_a_learnable_task",
    "tests/tiny/test_reproducibility.py::test_a_fresh_build_makes_the_shipped_judge_and_generator",
    "tests/project/test_docs_commands.py",
    "tests/train/test_grpo.py",
    "tests/train/test_distributed.py",
    "tests/datagen/test_data_engine_e2e.py",
    "tests/server/test_generator_service.py",
    "tests/tiny/test_reproducibility.py",
    "tests/eval/test_eval_generate.py",
    "tests/runtime/test_cluster.py",
    "tests/tiny/test_tiny_judge.py",
    "tests/tiny/test_tiny.py",
    "tests/runtime/test_scheduler_green.py",
    "tests/server/test_served_pipeline.py",
    "tests/server/test_serve_vlm.py",
)
"""What takes longest alone, longest first: single tests (``file::name``) and whole files (measured:
docs/notes/test-suite.md). A single test named here runs apart from the rest of its file."""

SPREAD = frozenset({"tests/project/test_docs_commands.py"})
"""Files whose tests are independent and long: each test may run on either worker."""


def rank_of(nodeid: str) -> tuple[int, bool]:
    """The place of a test in :data:`FIRST` (after all of it when absent), and whether it runs alone."""
    for index, prefix in enumerate(FIRST):
        if nodeid == prefix or nodeid.startswith(prefix + "::") or nodeid.startswith(prefix + "["):
            return index, "::" in prefix or prefix in SPREAD
    return len(FIRST), nodeid.split("::", 1)[0] in SPREAD


def order_and_group(items: list[pytest.Item], *, xdist: bool) -> None:
    """Sort ``items`` longest first (stable otherwise); under xdist, group each file's tests."""
    ranks = {id(item): rank_of(item.nodeid) for item in items}
    items.sort(key=lambda item: ranks[id(item)][0])
    if not xdist:
        return
    for item in items:
        if not ranks[id(item)][1]:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def adopt_xdist_groups(items: list[pytest.Item]) -> None:
    """Make the grouped ids pytest-xdist writes the ids pytest reports.

    pytest-xdist 3.8 appends ``@group`` to ``item._nodeid``; pytest 9 keeps a test's id in ``Node._id`` and
    never reads ``_nodeid``, so without this ``loadgroup`` groups nothing: a file's tests go to both
    workers and its module fixtures are built on both (docs/notes/test-suite.md).
    """
    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if isinstance(grouped, str) and grouped != item.nodeid:
            item._id = NodeId.parse(grouped)


def grouping_problem(items: list[pytest.Item]) -> str | None:
    """What is wrong when a grouped test kept its plain id, else None: a pytest or pytest-xdist upgrade can
    undo :func:`adopt_xdist_groups` silently, and the suite would then build each file's module fixtures on
    both workers, slower with nothing failing (it happened once: docs/notes/test-suite.md)."""
    plain = [
        item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
    ]
    if not plain:
        return None
    return (
        f"{len(plain)} tests grouped for xdist kept their plain ids (e.g. {plain[0]}): "
        "tests/helpers/schedule.py's adopt_xdist_groups no longer matches pytest-xdist's grouping."
    )
