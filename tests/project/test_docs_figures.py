"""The README quotes figures measured elsewhere; each must be the figure its doc records.

Why: the README's learning-test figures once disagreed with docs/testing.md. Every ``BEFORE -> AFTER``
figure of README.md must appear, as written, in a file under docs/.
"""

from __future__ import annotations

import re

from tests.helpers.common import REPO

FIGURE = re.compile(r"\d[\d.,]*\s*->\s*\d[\d.,]*\d")


def test_every_figure_the_readme_quotes_is_the_docs_figure() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").rglob("*.md")))
    quoted = FIGURE.findall(readme)
    assert quoted, "README.md quotes no before -> after figure: update this test"
    missing = [figure for figure in quoted if figure not in docs]
    assert not missing, f"README.md figures found in no file under docs/: {missing}"
