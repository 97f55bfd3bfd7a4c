"""The README quotes figures measured elsewhere; each must be the figure its doc records. And the user
guides stay guides: each under 250 lines, the design notes and journals in docs/notes/.

Why: the README's learning-test figures once disagreed with docs/testing.md, and the guides had grown
into lab notebooks (docs/serving.md reached 758 lines) that buried what a user needs.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.common import REPO

FIGURE = re.compile(r"\d[\d.,]*\s*->\s*\d[\d.,]*\d")
GUIDE_LINES = 250
WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
UNITS = r"steps?|pairs?|seeds?|minutes?|items?|prompts?|rollouts?|samples?|runs?|rounds?"
COUNT = re.compile(rf"\b(\d+(?:,\d{{3}})*|{'|'.join(WORDS)})(?:[ -][A-Za-z]+)?[ -]({UNITS})\b")
"""A count a sentence quotes: ``80 CPU steps``, ``seven pairs``, ``4 minutes``."""
DOC_LINK = re.compile(r"\(?(docs/[\w./-]+\.md)")
LINK = re.compile(r"\]\(([^)\s#]+\.md)?(?:#([\w-]+))?\)")


def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").rglob("*.md")))


def prose(text: str) -> str:
    """The text outside fenced blocks (commands quote numbers of their own)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def test_every_figure_the_readme_quotes_is_the_docs_figure() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quoted = FIGURE.findall(readme)
    assert quoted, "README.md quotes no before -> after figure: update this test"
    docs = docs_text()
    missing = [figure for figure in quoted if figure not in docs]
    assert not missing, f"README.md figures found in no file under docs/: {missing}"


def test_every_count_a_readme_paragraph_cites_a_doc_for_is_in_that_doc() -> None:
    """A README paragraph that names a doc and quotes a count (``80 CPU steps``, ``seven pairs``): the
    count, number and unit, is in that doc or in docs/notes/ (where the guides' journals went)."""
    notes = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs" / "notes").glob("*.md")))
    checked, missing = 0, []
    for paragraph in prose((REPO / "README.md").read_text(encoding="utf-8")).split("\n\n"):
        cited = [REPO / name for name in DOC_LINK.findall(paragraph)]
        texts = [p.read_text(encoding="utf-8") for p in cited if p.is_file()] + [notes]
        for number, unit in COUNT.findall(paragraph) if len(texts) > 1 else []:
            checked += 1
            said = re.compile(rf"\b{re.escape(number)}(?:[ -][A-Za-z]+)?[ -]{unit.rstrip('s')}s?\b")
            if not any(said.search(text) for text in texts):
                missing.append(f"{number} {unit} ({', '.join(str(p.relative_to(REPO)) for p in cited)})")
    assert checked, "README.md cites no doc for a count: update this test"
    assert not missing, f"README.md counts the doc it cites does not say: {missing}"


def test_every_user_guide_is_under_250_lines() -> None:
    """docs/*.md are the guides (what to run, what it writes, what to expect); design notes and
    measurement journals live in docs/notes/, linked from the guide."""
    guides = sorted((REPO / "docs").glob("*.md"))
    assert len(guides) >= 10
    long = {
        p.name: n for p in guides if (n := len(p.read_text(encoding="utf-8").splitlines())) >= GUIDE_LINES
    }
    assert not long, f"user guides of {GUIDE_LINES} lines or more (move notes to docs/notes/): {long}"


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_link_between_the_docs_reaches_a_file_and_heading() -> None:
    """The split moved sections between files: a link to a moved section would point nowhere."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target, anchor in LINK.findall(prose(page.read_text(encoding="utf-8"))):
            path = (page.parent / target).resolve() if target else page
            if target.startswith("http") or not str(path).startswith(str(REPO)):
                continue
            if not path.is_file() or (anchor and anchor not in anchors(path)):
                broken.append(f"{page.relative_to(REPO)} -> {target}#{anchor}")
    assert not broken, f"links to no file or no heading: {broken}"
