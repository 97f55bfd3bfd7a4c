"""The tests tree mirrors the package, and no test module imports another (issue 31, item 5).

Why: a reader finds a module's tests at the same path under tests/, and what several tests share lives
in one place (tests/conftest.py, a folder's conftest.py, tests/helpers/), not in a test module that
another one imports (which runs its tests' set-up twice and couples their edits).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.common import REPO, parse_python

TESTS = REPO / "tests"
PACKAGE = REPO / "src" / "interleave_thinker"
NOT_A_SUBPACKAGE = {
    "helpers": "what several tests share",
    "fixtures": "files the tests read",
    "project": "the repository's shape: layers, code shape, docs, the test tree itself",
}


def imported_modules(path: Path, root: Path = REPO) -> set[str]:
    """Every module ``path`` imports, relative imports resolved against its package under tests/."""
    package = list(path.relative_to(root).parent.parts)
    found: set[str] = set()
    for node in ast.walk(parse_python(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in imported_modules(path) if is_test_module(m))
        for path in sorted(TESTS.rglob("*.py"))
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_the_check_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    """The check above catches either spelling (shown on a module written for it, not a real one)."""
    sample = tmp_path / "tests" / "runtime" / "test_sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text(
        "from .test_batch import x\nimport tests.core.test_config\nfrom tests.helpers import common\n"
        "from . import conftest\nfrom .. import test_top\n",
        encoding="utf-8",
    )
    assert sorted(m for m in imported_modules(sample, tmp_path) if is_test_module(m)) == [
        "tests.core.test_config",
        "tests.runtime.test_batch",
        "tests.test_top",
    ]


def test_every_folder_under_tests_names_a_subpackage() -> None:
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sorted(folders - subpackages - set(NOT_A_SUBPACKAGE)) == []
    assert not list(TESTS.glob("test_*.py")), "a test module belongs in the folder of what it tests"
    for folder in folders - {"fixtures"}:
        assert (TESTS / folder / "__init__.py").is_file(), f"tests/{folder} needs an __init__.py"
