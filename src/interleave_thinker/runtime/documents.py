"""Render a finished trace as Markdown and as a self-contained HTML page (images referenced relatively)."""

from __future__ import annotations

import html
from pathlib import Path

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import DOCUMENT_MD, IMAGES_DIR, INDEX_HTML
from interleave_thinker.core.types import Attempt, StepRecord, Trace


def notices(trace: Trace, notice: str | None = None) -> list[str]:
    """Plain statements a reader must see before trusting the page."""
    found = [notice] if notice else []
    if trace.planner.plan is not None and trace.planner.plan.fallback:
        found.append(
            "The planner gave no valid plan, so the request ran as a single step (planner fallback)."
        )
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


def _inline(text: str) -> str:
    """One-line text (titles, notices): newlines would end the heading or quote they sit in."""
    return markdown_text(" ".join(text.split()))


def render_markdown(trace: Trace, notice: str | None = None) -> str:
    lines = [f"# {_inline(trace.request.text)}", ""]
    lines += [f"> {_inline(n)}" for n in notices(trace, notice)]
    lines += [""] if lines[-1] != "" else []
    for name in trace.input_images:
        lines += [f"![input]({IMAGES_DIR}/{name})", ""]
    for index, step in enumerate(trace.steps, start=1):
        title = _inline(step.step.step_name or f"Step {index}")
        lines += [f"## {index}. {title}", ""]
        if step.text:
            lines += [markdown_text(step.text), ""]
        if step.accepted_image:
            lines += [f"![step {index}]({IMAGES_DIR}/{step.accepted_image})", ""]
    return "\n".join(lines).rstrip() + "\n"


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:860px;margin:2rem auto;padding:0 1rem;color:#222}
.notice{background:#fff4d6;border:1px solid #e0b84c;padding:.6rem .8rem;border-radius:6px;margin:.4rem 0}
.step{border-top:1px solid #ddd;padding:1rem 0}
img{max-width:100%;border:1px solid #ccc;border-radius:4px}
.attempt{display:flex;gap:1rem;margin:.5rem 0}.attempt img{width:160px;height:auto}
.meta{color:#666;font-size:.85rem}pre{white-space:pre-wrap;background:#f6f6f6;padding:.5rem}
details{margin:.5rem 0}
""".strip()


def _attempt_html(attempt: Attempt) -> str:
    state = (
        "accepted"
        if attempt.accepted and not attempt.forced
        else "forced pass"
        if attempt.forced
        else "rejected"
    )
    parts = [
        f'<div class="attempt"><div class="meta">attempt {attempt.attempt} · seed {attempt.seed} · {state}</div>'
    ]
    if attempt.image_file:
        parts.append(
            f'<img src="{IMAGES_DIR}/{html.escape(attempt.image_file)}" alt="attempt {attempt.attempt}">'
        )
    parts.append("<div>")
    parts.append(f"<p><b>Prompt:</b> {html.escape(attempt.prompt)}</p>")
    if attempt.verdict is not None:
        parts.append(f"<p><b>Critic:</b> success={attempt.verdict.success}</p>")
        if attempt.verdict.reasoning:
            parts.append(f"<pre>{html.escape(attempt.verdict.reasoning)}</pre>")
        if not attempt.verdict.success:
            parts.append(f"<p><b>Refined prompt:</b> {html.escape(attempt.verdict.refine_prompt)}</p>")
    elif attempt.critic_error:
        parts.append(f"<p><b>Critic gave no valid verdict:</b> {html.escape(attempt.critic_error)}</p>")
    if attempt.generation_error:
        parts.append(f"<p><b>Generation failed:</b> {html.escape(attempt.generation_error)}</p>")
    parts.append("</div></div>")
    return "".join(parts)


def _step_html(index: int, step: StepRecord) -> str:
    title = html.escape(step.step.step_name or f"Step {index}")
    parts = [f'<section class="step"><h2>{index}. {title}</h2>']
    if step.text:
        parts.append(f"<p>{html.escape(step.text)}</p>")
    if step.accepted_image:
        parts.append(f'<img src="{IMAGES_DIR}/{html.escape(step.accepted_image)}" alt="step {index}">')
    if step.attempts:
        parts.append(f"<details><summary>{len(step.attempts)} attempt(s) and the critic's notes</summary>")
        parts += [_attempt_html(a) for a in step.attempts]
        parts.append("</details>")
    parts.append("</section>")
    return "".join(parts)


def render_html(trace: Trace, notice: str | None = None) -> str:
    title = html.escape(trace.request.text.strip())
    body = [f"<h1>{title}</h1>"]
    body += [f'<div class="notice">{html.escape(n)}</div>' for n in notices(trace, notice)]
    for name in trace.input_images:
        body.append(f'<img src="{IMAGES_DIR}/{html.escape(name)}" alt="input image" style="width:200px">')
    body += [_step_html(i, s) for i, s in enumerate(trace.steps, start=1)]
    if trace.planner.plan is not None and trace.planner.plan.reasoning:
        body.append(
            f"<details><summary>Planner reasoning</summary><pre>{html.escape(trace.planner.plan.reasoning)}</pre></details>"
        )
    backends = ", ".join(f"{role}: {html.escape(spec)}" for role, spec in trace.backends.items())
    body.append(
        f'<p class="meta">{backends} · status {trace.status} · {trace.duration_s:.1f}s · trace.json</p>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def write_documents(trace: Trace, out_dir: Path, notice: str | None = None) -> None:
    write_atomic(out_dir / DOCUMENT_MD, render_markdown(trace, notice))
    write_atomic(out_dir / INDEX_HTML, render_html(trace, notice))
