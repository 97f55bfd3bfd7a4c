"""The suite's order for two workers: longest first, each file together unless named alone."""

from __future__ import annotations

from tests.helpers.common import REPO
from tests.helpers.schedule import FIRST, SPREAD, rank_of

LEARNING = "tests/train/test_grpo.py::test_grpo_raises_held_out_accuracy_on_a_learnable_task"


def test_a_test_named_alone_goes_first_and_its_file_mates_stay_together() -> None:
    assert rank_of(LEARNING) == (0, True)
    assert rank_of("tests/train/test_grpo.py::test_config_errors_name_the_key") == (
        FIRST.index("tests/train/test_grpo.py"),
        False,
    )


def test_spread_files_run_test_by_test_and_unknown_files_last() -> None:
    block = "tests/project/test_docs_commands.py::test_marked_block_runs_as_written[README.md:124]"
    assert rank_of(block) == (FIRST.index("tests/project/test_docs_commands.py"), True)
    assert rank_of("tests/core/test_stats.py::test_x") == (len(FIRST), False)
    assert "tests/train/test_grpo.py" not in SPREAD


def test_every_name_in_first_is_a_test_file() -> None:
    files = {name.split("::", 1)[0] for name in FIRST}
    assert sorted(f for f in files if not (REPO / f).is_file()) == []


def test_idle_openmp_threads_sleep_in_the_tests_and_their_pinned_children() -> None:
    """Beside another busy process, spinning OpenMP threads slowed a 2-thread child up to 4 times."""
    import os

    from interleave_thinker.tiny.pinned import pinned_env

    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert pinned_env()["OMP_WAIT_POLICY"] == "PASSIVE"
