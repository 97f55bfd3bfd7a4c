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
from tests.helpers.common import REPO

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


# --- the templates behind the pages (issue 17, items 6 and 7) -------------------------------------
def test_page_templates_are_package_data() -> None:
    """Loaded the way an installed package finds them (a wheel or `pip install -e .`)."""
    from importlib.resources import files

    from jinja2 import select_autoescape

    folder = files("interleave_thinker.runtime").joinpath("templates")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".j2"))
    assert names == ["document.md.j2", "index.html.j2", "report.html.j2"]
    assert "{{" in folder.joinpath("index.html.j2").read_text(encoding="utf-8")
    autoescape = select_autoescape(enabled_extensions=("html.j2",), default_for_string=True, default=True)
    assert autoescape("index.html.j2") and autoescape("report.html.j2")
    # ...and the wheel carries them: each matches a package-data pattern of pyproject.toml.
    import fnmatch
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["interleave_thinker"]
    for name in names:
        assert any(fnmatch.fnmatch(f"runtime/templates/{name}", p) for p in patterns), name


def test_markdown_values_are_escaped_by_the_template_itself() -> None:
    """document.md escapes every value it prints, not only those a caller remembered to escape."""
    from interleave_thinker.runtime.documents import page_templates

    template = page_templates("markdown").from_string("# {{ title | oneline }}\n{{ body }}\n")
    page = template.render(title="a\n<script>x</script>", body="[y](javascript:z) <img onerror=1>")
    assert page == "# a &lt;script&gt;x&lt;/script&gt;\n\\[y\\](javascript:z) &lt;img onerror=1&gt;"


def test_attempts_are_numbered_as_their_files_and_accepted_images_are_not_smaller_than_thumbnails(
    run_dir: Path,
) -> None:
    """Issue 33 item 7: "attempt 1" stood beside ``step01_attempt0.png``; attempts now count from 0,
    as their files do, and each names its file."""
    import re

    page = (run_dir / "index.html").read_text(encoding="utf-8")
    labels = re.findall(r'<div class="meta">(attempt [^<]*)</div>', page)
    assert [label.split(" · seed")[0] for label in labels] == [
        f"attempt 0 · step0{i}_attempt0.png" for i in (1, 2, 3)
    ]
    assert "attempt 1" not in page
    assert re.findall(r'alt="(attempt \d+)"', page) == ["attempt 0"] * 3  # one accepted attempt per step
    thumb = int(re.search(r"\.attempt img\{width:(\d+)px", page).group(1))  # type: ignore[union-attr]
    accepted = int(re.search(r"img\.accepted\{min-width:min\((\d+)px,100%\)", page).group(1))  # type: ignore[union-attr]
    assert accepted >= thumb
    assert page.count('<img class="accepted"') == 3
    assert "image-rendering:pixelated" in page  # 16 px images are upscaled: keep them sharp


def test_report_html_is_escaped_and_links_each_request(run_dir: Path) -> None:
    from interleave_thinker.core.types import Trace
    from interleave_thinker.runtime.reports import render_report, summarize

    trace = Trace.model_validate_json((run_dir / "trace.json").read_text(encoding="utf-8"))
    traces = {"r<1>": trace}
    page = render_report(traces, summarize(traces))
    parser = Elements()
    parser.feed(page)
    assert [t for t, _ in parser.tags].count("script") == 1  # the page's own status/task filter
    for tag, attrs in parser.tags:
        assert tag not in ("svg", "iframe", "object"), (tag, attrs)
        handlers = {k: v for k, v in attrs.items() if k.startswith("on")}
        assert handlers in ({}, {"onchange": "f()"}), (tag, attrs)  # only the page's own selects
        for name in ("href", "src"):
            assert not attrs.get(name, "").strip().lower().startswith("javascript:"), (tag, attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the prompt, shown as text
    assert 'href="r%3C1%3E/index.html"' not in page and 'href="requests/r%3C1%3E/index.html"' in page
    assert page.count('src="requests/r%3C1%3E/images/step0') == 3
    assert "1 requests: 1 succeeded, 0 failed, 0 unfinished · success rate 100.0%" in page


def test_a_tiny_planners_plan_is_explained_in_one_line(run_dir: Path) -> None:
    """Issue 33 item 8: the tiny plan for a cat is about "the moon", and only docs/training.md said
    why. Both pages say it in one line when the planner that ran is a ``tiny:`` stand-in."""
    from interleave_thinker.core.types import Trace
    from interleave_thinker.runtime.documents import TINY_PLAN, render_html, render_markdown

    trace = Trace.model_validate_json((run_dir / "trace.json").read_text(encoding="utf-8"))
    before = render_html(trace)
    assert TINY_PLAN not in render_markdown(trace) and "tiny preset" not in before
    trace.backends["planner"] = "tiny:planner-sft"
    assert f"> {markdown_text(TINY_PLAN)}\n" in render_markdown(trace)
    page = render_html(trace)
    assert page.count('<div class="notice">') == before.count('<div class="notice">') + 1
    assert "tiny preset&#39;s planner" in page
    assert "\n" not in TINY_PLAN and len(TINY_PLAN) < 200
    assert trace.planner.plan is not None
    trace.planner.plan.fallback = True  # a one-step fallback is no plan of the planner's: nothing to explain
    assert "tiny preset" not in render_html(trace)
