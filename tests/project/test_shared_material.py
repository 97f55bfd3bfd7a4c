"""The ../shared material: a test needing it skips on a developer's clone, fails under CI (issue 31, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SHARED_ENV, shared_path
from tests.helpers.common import REPO


def outcome(*parts: str) -> BaseException:
    """What ``shared_path`` raised for a missing path: a skip or a failure (either would end a test)."""
    try:
        shared_path(*parts)
    except (pytest.skip.Exception, pytest.fail.Exception) as raised:
        return raised
    raise AssertionError("shared_path returned a path that does not exist")


def test_present_material_is_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fixtures").mkdir()
    monkeypatch.setenv(SHARED_ENV, str(tmp_path))
    assert shared_path("fixtures") == tmp_path / "fixtures"


def test_missing_material_skips_outside_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "absent"))
    for value in (None, "", "false", "0"):
        if value is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", value)
        raised = outcome("fixtures")
        assert isinstance(raised, pytest.skip.Exception), value
        assert str(raised).endswith("absent/fixtures is not available")


@pytest.mark.parametrize("value", ["true", "1", "True"])
def test_missing_material_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "absent"))
    monkeypatch.setenv("CI", value)
    raised = outcome("fixtures")
    assert isinstance(raised, pytest.fail.Exception), f"skipped under CI={value}: {raised}"
    assert str(raised) == (
        f"shared material {tmp_path / 'absent' / 'fixtures'} is not available, and CI is set: put the "
        f"shared folder beside the checkout, or point {SHARED_ENV} at it"
    )


def test_ci_exports_ci() -> None:
    """.ci/run is what CI runs: it sets CI as GitHub Actions does, so the rule above holds there."""
    assert "\nexport CI=true\n" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
