"""Render a finished trace as Markdown and as a self-contained HTML page (images referenced relatively),
from the Jinja2 templates in ``runtime/templates/`` (package data)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import DOCUMENT_MD, IMAGES_DIR, INDEX_HTML
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.fallbacks import FALLBACK_WARNING
from interleave_thinker.runtime.file_writes import off_loop
from interleave_thinker.runtime.opt_in import ranked_attempts, repair_note, review_note, selection_note

TEMPLATES_DIR = "templates"
"""The package data folder of the page templates (``runtime/templates/*.j2``), shared with ``reports``."""


TINY_PLAN = (
    "This plan comes from the tiny preset's planner, a stand-in trained only to write the plan format, "
    'so its steps need not be about the request (docs/notes/training.md, "Format-trained tiny models").'
)
"""The one line beside a tiny planner's plan: the first thing a newcomer asks is why the cat became a moon."""


def tiny_plan_line(planner: str | None, has_plan: bool = True) -> str | None:
    """:data:`TINY_PLAN` when the planner that ran is a ``tiny:`` stand-in and it gave a plan."""
    return TINY_PLAN if has_plan and (planner or "").startswith("tiny:") else None


def notices(trace: Trace, notice: str | None = None) -> list[str]:
    """Plain statements a reader must see before trusting the page."""
    found = [notice] if notice else []
    plan = trace.planner.plan
    tiny = tiny_plan_line(trace.backends.get("planner"), plan is not None and not plan.fallback)
    if tiny:
        found.append(tiny)
    if trace.planner.plan is not None and trace.planner.plan.fallback:
        found.append(
            "The planner gave no valid plan, so the request ran as a single step (planner fallback)."
        )
    # forced steps, failed selections, reviews and judgements: the page says what the run went on without
    found.extend(w for w in trace.warnings if w.startswith(FALLBACK_WARNING))
    if trace.templates is not None and trace.templates.kind != "released":
        found.append(
            f"Prompt templates: {trace.templates.kind} ({trace.templates.origin}), not the released ones."
        )
    if trace.status == "failed" and trace.error:
        found.append(f"The run failed: {trace.error}")
    return found


_MARKDOWN_ESCAPES = str.maketrans(
    {"\\": "\\\\", "&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]"}
)


def markdown_text(text: str) -> str:
    """Text from a prompt or a model reply, made inert in Markdown: it shows as written, and no HTML
    (``<script>``, ``onerror=``) or link (``[x](javascript:...)``) in it becomes markup. Other
    Markdown (emphasis, lists) still renders, as the models write it."""
    return text.translate(_MARKDOWN_ESCAPES)


def _oneline(text: str) -> str:
    """One-line text (titles, notices): newlines would end the heading or quote they sit in."""
    return " ".join(text.split())


def _markdown_value(value: object) -> str:
    """Every ``{{ }}`` value of a Markdown template, escaped: Markdown's autoescape."""
    return "" if value is None else markdown_text(str(value))


@cache
def page_templates(kind: str) -> Environment:
    """The environment of the package's page templates: ``html`` autoescaped (``select_autoescape``),
    ``markdown`` escaped by :func:`markdown_text` on every value (Jinja has no Markdown autoescape)."""
    if kind == "html":
        autoescape = select_autoescape(enabled_extensions=("html.j2",), default_for_string=True, default=True)
        return _environment(autoescape=autoescape)
    environment = _environment(
        autoescape=False, finalize=_markdown_value, trim_blocks=True, lstrip_blocks=True
    )
    environment.filters["oneline"] = _oneline
    return environment


def _environment(**options: Any) -> Environment:
    """What both kinds share: the package's templates, and a missing value an error (``StrictUndefined``)."""
    loader = PackageLoader("interleave_thinker.runtime", TEMPLATES_DIR)
    return Environment(loader=loader, undefined=StrictUndefined, **options)


def render_markdown(trace: Trace, notice: str | None = None) -> str:
    page = (
        page_templates("markdown")
        .get_template("document.md.j2")
        .render(
            title=trace.request.text,
            notices=notices(trace, notice),
            input_images=trace.input_images,
            steps=trace.shown_steps(),
            images_dir=IMAGES_DIR,
        )
    )
    return page.rstrip() + "\n"


THUMB_PX = 160
"""Width of an attempt's thumbnail on the page."""
ACCEPTED_MIN_PX = 2 * THUMB_PX
"""Smallest width of a step's accepted image: never smaller than the thumbnails (tiny images are 64 px)."""


def render_html(trace: Trace, notice: str | None = None) -> str:
    plan = trace.planner.plan
    generation = trace.settings.get("generation")
    width = generation.get("width") if isinstance(generation, dict) else None
    return (
        page_templates("html")
        .get_template("index.html.j2")
        .render(
            title=trace.request.text.strip(),
            notices=notices(trace, notice),
            input_images=trace.input_images,
            steps=trace.shown_steps(),
            selections={i: selection_note(s) for i, s in enumerate(trace.steps, start=1) if s.selected},
            ranked={i: ranked_attempts(s) for i, s in enumerate(trace.steps, start=1)},
            review=review_note(trace.repair) if trace.repair is not None else None,
            repairs={r.step_number: (r, repair_note(r)) for r in trace.repair.steps} if trace.repair else {},
            reasoning=plan.reasoning if plan is not None else None,
            backends=trace.backends,
            status=trace.status,
            duration_s=trace.duration_s,
            images_dir=IMAGES_DIR,
            thumb_px=THUMB_PX,
            accepted_min_px=ACCEPTED_MIN_PX,
            pixelated=isinstance(width, int) and width < ACCEPTED_MIN_PX,  # upscaled: keep the pixels sharp
        )
    )


def write_documents(trace: Trace, out_dir: Path, notice: str | None = None) -> None:
    """Both pages, rendered and written off the event loop in a batch (``runtime/file_writes``)."""

    def write() -> None:
        write_atomic(out_dir / DOCUMENT_MD, render_markdown(trace, notice))
        write_atomic(out_dir / INDEX_HTML, render_html(trace, notice))

    off_loop(write)
