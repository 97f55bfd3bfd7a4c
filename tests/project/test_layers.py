"""The layering as docs/architecture.md draws it: no import points up or sideways, and no import cycle.

The layer order is parsed from the ```` ```layers ```` block of docs/architecture.md, so the doc and this
test cannot drift. Every module of the package is read with ``ast`` (nothing is imported): module-level and
function-level imports, relative imports and ``importlib.import_module("...")`` literals all count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.common import parse_python

PACKAGE = "interleave_thinker"
SRC = REPO / "src" / PACKAGE
DOC = REPO / "docs" / "architecture.md"


def parse_layers(doc: str) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """Rows of the ``layers`` block (top row = 0) and the extra forbidden arrows (``A -/-> B``)."""
    found = re.search(r"^```layers\n(.*?)^```", doc, re.MULTILINE | re.DOTALL)
    assert found, f"{DOC} has no ```layers block"
    rows: dict[str, int] = {}
    forbidden: set[tuple[str, str]] = set()
    lines = [raw.strip() for raw in found.group(1).splitlines() if raw.strip()]
    for line in (line for line in lines if "-/->" in line):
        source, target = (part.strip() for part in line.split("-/->"))
        forbidden.add((source, target))
    for row, line in enumerate(line for line in lines if "-/->" not in line):
        rows.update({name.strip(): row for name in line.split("|")})
    return rows, forbidden


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every module name ``source`` imports, anywhere in it; ``from m import n`` gives ``m`` and ``m.n``."""
    here = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and _callee(node) == "import_module" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    return names


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (names that are not modules of the package are dropped)."""
    files = {module_name(path, src): path for path in sorted(src.rglob("*.py"))}
    return {
        module: {
            name
            for name in imported_names(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
            if name in files and name != module
        }
        for module, path in files.items()
    }


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[0] if len(parts) == 1 or parts[1] == "__main__" else parts[1]


def bad_arrows(
    graph: dict[str, set[str]], rows: dict[str, int], forbidden: set[tuple[str, str]]
) -> list[str]:
    """Imports that point to a higher row, a sibling in the same row, or an arrow the doc forbids."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            source_layer, target_layer = layer_of(module), layer_of(target)
            if source_layer == target_layer:
                continue
            if rows[target_layer] <= rows[source_layer] or (source_layer, target_layer) in forbidden:
                bad.append(f"{module} -> {target} ({source_layer} may not import {target_layer})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None and child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child is not None:
                if child in stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(SRC)


def test_every_layer_of_the_package_is_in_the_doc(graph: dict[str, set[str]]) -> None:
    rows, _ = parse_layers(DOC.read_text(encoding="utf-8"))
    missing = sorted({layer_of(module) for module in graph} - set(rows))
    assert missing == [], f"add these subpackages to the ```layers block of {DOC}: {missing}"


def test_no_import_points_up_or_sideways(graph: dict[str, set[str]]) -> None:
    rows, forbidden = parse_layers(DOC.read_text(encoding="utf-8"))
    assert bad_arrows(graph, rows, forbidden) == []


def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_the_walker_sees_every_kind_of_import() -> None:
    source = (
        "import interleave_thinker.core.errors\n"
        "from . import sibling\n"
        "from ..runtime.loop import StepLoop\n"
        "def lazy():\n"
        "    from interleave_thinker.train import tiny\n"
        "    importlib.import_module('interleave_thinker.eval.report')\n"
    )
    names = imported_names(source, "interleave_thinker.backends.specs", is_package=False)
    assert {
        "interleave_thinker.core.errors",
        "interleave_thinker.backends.sibling",
        "interleave_thinker.runtime.loop",
        "interleave_thinker.train.tiny",
        "interleave_thinker.eval.report",
    } <= names


def test_the_rules_catch_upward_sideways_forbidden_arrows_and_cycles() -> None:
    rows, forbidden = parse_layers("```layers\ntop\nleft | right\nbottom\ntop -/-> bottom\n```\n")
    assert rows == {"top": 0, "left": 1, "right": 1, "bottom": 2} and forbidden == {("top", "bottom")}
    graph = {
        "p.bottom.a": {"p.left.b"},
        "p.left.b": {"p.right.c", "p.bottom.a"},
        "p.right.c": set(),
        "p.top.d": {"p.bottom.a", "p.left.b"},
    }
    assert bad_arrows(graph, rows, forbidden) == [
        "p.bottom.a -> p.left.b (bottom may not import left)",
        "p.left.b -> p.right.c (left may not import right)",
        "p.top.d -> p.bottom.a (top may not import bottom)",
    ]
    assert cycles(graph) == [["p.bottom.a", "p.left.b"]]


def test_no_product_module_imports_the_testing_wing(graph: dict[str, set[str]]) -> None:
    """``testing/`` holds doubles and contracts only: the tiny preset the product runs lives in ``tiny/``."""
    product = {module: targets for module, targets in graph.items() if layer_of(module) != "testing"}
    wing = sorted(
        f"{module} -> {target}"
        for module, targets in product.items()
        for target in targets
        if layer_of(target) == "testing"
    )
    assert wing == []
    assert "interleave_thinker.tiny.kind" in graph["interleave_thinker"]
