"""Shared test fixtures: the ../shared material (required under CI, skipped cleanly elsewhere when absent),
an isolated home, one torch thread per xdist worker, the longest files first, and a copy of the schema-1 run folder."""

from __future__ import annotations

import os
import shutil

# pytest's hook for an exception raised in a `__del__` imports tracemalloc on first use. When the garbage
# collector runs such a `__del__` while a test is inside an import (Gradio's Blocks tries to import IPython
# on every build), CPython 3.11's import lock meets an import nested on the same thread and the outer one
# raises KeyError(<thread id>) (CPython gh-91351, fixed in 3.12). Loaded here, tracemalloc is never
# imported inside another import. Seen in tests/ui beside two CPU burners (docs/notes/test-suite.md).
import tracemalloc  # noqa: F401  (loaded before any test, for the reason above)
from collections.abc import Iterator
from pathlib import Path

from interleave_thinker.tiny.pinned import PINNED_NUMERICS
from tests.helpers.common import REPO, tiny_dir
from tests.helpers.runs import V1_RUN

# The test process (and the services it starts) runs with the tiny builds' kernel caps and thread counts,
# set before anything imports torch. Not MKL's reproducible mode: it makes results depend on the thread
# count, and tests compare a served generator (its own thread count) with the local one. See docs/testing.md.
os.environ.update({k: v for k, v in PINNED_NUMERICS.items() if k != "MKL_CBWR"})
# Idle OpenMP threads sleep instead of spinning: beside another busy process (the other xdist worker, a
# pinned child, anything else on the machine) a spinning thread takes the core its partner needs, and a
# 2-thread child ran up to 4 times slower (docs/notes/test-suite.md). Results do not change.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make unit` runs two xdist workers on two cores: one thread each (and in the servers they start), so
    # they do not fight. The tiny builds and the learning test run in pinned children with their own counts.
    os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})

import pytest

from tests.helpers.schedule import adopt_xdist_groups, grouping_problem, order_and_group

SHARED_ENV = "INTERLEAVE_THINKER_SHARED"
__all__ = ["REPO", "SHARED_ENV", "shared_path"]


def shared_path(*parts: str) -> Path:
    """A path under the read-only ``shared`` folder beside the checkout (or ``$INTERLEAVE_THINKER_SHARED``).

    Absent, the test is skipped on a developer's clone, but fails under CI (``CI`` set, as .ci/run and
    GitHub Actions set it): a CI run that silently skipped every test needing the material proves nothing."""
    root = Path(os.environ.get(SHARED_ENV, REPO.parent / "shared"))
    path = root.joinpath(*parts)
    if not path.exists():
        message = f"shared material {path} is not available"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(
                f"{message}, and CI is set: put the shared folder beside the checkout, or point "
                f"{SHARED_ENV} at it",
                pytrace=False,
            )
        pytest.skip(message)
    return path


@pytest.fixture
def prompts_dir() -> Path:
    return shared_path("reference", "prompts")


@pytest.fixture
def v1_run(tmp_path: Path) -> Path:
    """A copy of the run folder written by the pipeline at schema 1 (tests/fixtures/trace_v1)."""
    folder = tmp_path / "v1"
    shutil.copytree(V1_RUN, folder)
    return folder


@pytest.fixture(autouse=True, scope="session")
def no_preflight() -> Iterator[None]:
    """The served doubles answer (and count) the calls of the run they script: the preflight's extra call to
    each served backend is off unless a test turns it on (``--preflight``). Session-wide, so a module
    fixture's run (set up before any function-scoped fixture) is covered too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INTERLEAVE_THINKER_REMOTE__PREFLIGHT", "false")
        yield


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test downloads or touches the user's caches, except the (expensive, deterministic) tiny models."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("INTERLEAVE_THINKER_TINY_DIR", tiny_dir())
    monkeypatch.setenv("INTERLEAVE_THINKER_HOME", str(home))
    monkeypatch.setenv("INTERLEAVE_THINKER_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Gradio deletes what it cached when a server stops, and names cached files by content: a demo in the
    # other xdist worker producing the same image would delete this test's result (a fresh-clone CI flake).
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(home / "gradio"))
    monkeypatch.delenv("INTERLEAVE_THINKER_PROMPTS", raising=False)
    monkeypatch.delenv("INTERLEAVE_THINKER_PROMPTS_URL", raising=False)
    return home


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Longest files first, each file on one xdist worker (its module fixtures built once); see
    tests/helpers/schedule.py. The order and groups are set before xdist's own hook, which reads the
    groups; its grouped ids are made the ones pytest 9 reports after it."""
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    order_and_group(items, xdist=xdist)
    yield
    if xdist:
        adopt_xdist_groups(items)
        if config.getoption("loadgroup", False):  # set on each worker by pytest-xdist for --dist loadgroup
            problem = grouping_problem(items)
            if (
                problem is not None
            ):  # failed at the tests' set-up: an error raised here would crash the worker
                config.stash[GROUPING_PROBLEM] = problem


GROUPING_PROBLEM = pytest.StashKey[str]()


@pytest.fixture(scope="session", autouse=True)
def _xdist_grouping_holds(request: pytest.FixtureRequest) -> None:
    """Every test fails with the reason when this worker's grouping was lost (see ``grouping_problem``)."""
    problem = request.config.stash.get(GROUPING_PROBLEM, None)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
