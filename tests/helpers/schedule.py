"""The order and grouping of tests for ``make unit`` (two xdist workers, ``--dist loadgroup``).

Why: on two cores the suite's wall time is the longer worker's, and xdist hands out work in collection
order. The longest files go first (largest first is close to the best split of a few long jobs), so no
long file starts last while the other worker idles. Every test of a file shares one xdist group, so a
module fixture (servers, a trained model, a generated dataset) is built once, on one worker; the files in
:data:`SPREAD` hold independent long tests that are better spread over both workers. The figures behind
:data:`LONGEST` are in docs/notes/test-suite.md; a file missing from it only runs later.
"""

from __future__ import annotations

import pytest

LONGEST = (
    "tests/train/test_grpo.py",
    "tests/project/test_docs_commands.py",
)
"""The files that take longest alone, longest first (measured: docs/notes/test-suite.md)."""

SPREAD = frozenset({"tests/project/test_docs_commands.py"})
"""Files whose tests are independent and long: each test may run on either worker."""


def file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def order_and_group(items: list[pytest.Item], *, xdist: bool) -> None:
    """Sort ``items`` longest file first (stable otherwise); under xdist, group each file's tests."""
    rank = {path: index for index, path in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(file_of(item), len(rank)))
    if not xdist:
        return
    for item in items:
        if file_of(item) not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(file_of(item)))
