"""The package's shape stays reviewable: no module over 400 lines, no function over 60 lines.

Why: a reader should find one job per module and read a function in one screen (issue 15). The only
exceptions are the tiny-model builders, which spell out a model configuration field by field; they
are named one by one below, so a new long function anywhere (a builder included) fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import interleave_thinker
from tests.helpers.common import parse_python

PACKAGE = Path(interleave_thinker.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TINY_BUILDERS = frozenset({"build_tiny_vlm", "build_tiny_flux2_klein"})
"""Functions allowed past the function limit, by name, and only in the tiny-model modules."""


def _is_tiny_module(relative: Path) -> bool:
    """``tiny/*.py``: where the tiny models live."""
    return relative.parts[0] == "tiny"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _long_functions(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function or method over the limit, nested ones too."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = (child.end_lineno or child.lineno) - child.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append((name, child.lineno, length))
                name += "."
            visit(child, name)

    visit(parse_python(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return found


def _allowed(relative: Path, qualified: str) -> bool:
    return _is_tiny_module(relative) and qualified in TINY_BUILDERS


def test_the_walk_finds_the_package() -> None:
    modules = {p.relative_to(PACKAGE).as_posix() for p in _modules()}
    assert "core/stats.py" in modules and "runtime/pipeline.py" in modules


def test_no_module_is_over_400_lines() -> None:
    too_long = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"modules over {MAX_MODULE_LINES} lines (split them by job): {too_long}"


def test_no_function_is_over_60_lines_outside_the_tiny_builders() -> None:
    offenders = [
        f"{p.relative_to(PACKAGE).as_posix()}:{line} {name} ({length} lines)"
        for p in _modules()
        for name, line, length in _long_functions(p)
        if not _allowed(p.relative_to(PACKAGE), name)
    ]
    assert offenders == [], f"functions over {MAX_FUNCTION_LINES} lines: {offenders}"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """The walker measures what it should: a 61-line function and a nested one are caught."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    source = tmp_path / "long.py"
    source.write_text(
        f"def outer():\n    def inner():\n{body.replace('    ', '        ')}\n    return inner\n"
    )
    names = {name: length for name, _, length in _long_functions(source)}
    assert names == {"outer": 63, "outer.inner": 61}
    assert not _allowed(Path("runtime/loop.py"), "build_tiny_vlm")
    assert not _allowed(Path("tiny/models.py"), "build_tiny_anything")
    assert _allowed(Path("tiny/models.py"), "build_tiny_vlm")
