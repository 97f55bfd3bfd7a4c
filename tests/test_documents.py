"""document.md and index.html of a run whose prompt and model replies carry hostile markup (issue 16, item 10).

The pages are rendered the way a reader sees them (document.md through a CommonMark renderer with
raw HTML enabled, index.html as it is) and every element and attribute is checked: nothing from a
prompt or a reply may become a script, an event handler or a ``javascript:`` link.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.runtime.documents import markdown_text
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend

HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "[click](javascript:alert(3))",
    "<javascript:alert(4)>",
    '<a href="javascript:alert(5)">x</a>',
    "![pic](javascript:alert(6))",
    "[ref][r]\n\n[r]: javascript:alert(7)",
    "&#106;avascript:alert(8) <svg onload=alert(9)>",
    "\\[esc](javascript:alert(10))",
]
PROMPT = "Draw a cat " + " ".join(HOSTILE)


class Elements(HTMLParser):
    """Every start tag with its attributes, as a browser would build them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))


def assert_inert(page: str) -> list[tuple[str, dict[str, str]]]:
    parser = Elements()
    parser.feed(page)
    for tag, attrs in parser.tags:
        assert tag not in ("script", "svg", "iframe", "object"), (tag, attrs)
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        for name in ("href", "src"):
            assert not attrs.get(name, "").strip().lower().startswith("javascript:"), (tag, attrs)
    return parser.tags


def hostile_plan() -> str:
    steps = ", ".join(
        f"{{'step_number': {i}, 'step_name': {('S ' + text)!r}, 'instruction': 'Draw.', "
        f"'prompt': 'a cat', 'auxiliary_text': {text!r}}}"
        for i, text in enumerate(HOSTILE[:3], start=1)
    )
    return f"<think>{HOSTILE[0]}</think><answer>{{'execution_plan': [{steps}]}}</answer>"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    verdict = f"<think>{HOSTILE[1]}</think><answer>{{'previous_step_success': True, 'refine_prompt': 'ok'}}</answer>"
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "generation": {"width": 16, "height": 16, "steps": 1},
        }
    )
    pipe = Pipeline(
        planner=ScriptedVLMBackend([hostile_plan()]),
        critic=ScriptedVLMBackend([verdict], repeat_last=True),
        generator=ScriptedImageBackend(),
        config=config,
        templates=builtin_templates(),
    )
    out = tmp_path_factory.mktemp("hostile")
    assert pipe(PROMPT, out_dir=out).ok
    return out


def test_document_md_renders_no_script_handler_or_javascript_link(run_dir: Path) -> None:
    markdown_it = pytest.importorskip("markdown_it")
    source = (run_dir / "document.md").read_text(encoding="utf-8")
    rendered = markdown_it.MarkdownIt("commonmark", {"html": True}).render(source)
    tags = assert_inert(rendered)
    assert [t for t, _ in tags].count("img") == 3  # the three step images, and nothing from the text
    # the text still reads as written: the reader sees every hostile string as plain text
    shown = rendered.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    for text in HOSTILE[:3]:
        assert text in shown


def test_index_html_is_escaped(run_dir: Path) -> None:
    page = (run_dir / "index.html").read_text(encoding="utf-8")
    tags = assert_inert(page)
    assert [t for t, _ in tags].count("img") == 6  # each step's image and its attempt's thumbnail
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_markdown_text_escapes_only_markup() -> None:
    assert markdown_text("a *b* & <i>c</i> [d](e) \\") == "a *b* &amp; &lt;i&gt;c&lt;/i&gt; \\[d\\](e) \\\\"
