"""HTML for the page: status, plan, live steps and the final interleaved page.

Everything a model (or a visitor) wrote is escaped here; ``$``, ``{`` and ``}`` too, because Gradio's
HTML component passes its value through a template engine. Elements carry ``data-ev`` names so a
browser test can tell what appeared, and in which order.
"""

from __future__ import annotations

import html

from interleave_thinker.core.types import Attempt, PlanStep
from interleave_thinker.ui.live import AttemptView, RunView
from interleave_thinker.ui.thumbs import PAGE_SIDE, data_uri

PHASES = {
    "waiting": "Ready.",
    "planning": "The planner is thinking…",
    "running": "Generating and checking each step…",
    "done": "Done.",
    "cancelled": "Run cancelled; the zip holds what was made before Stop.",
    "error": "The run stopped.",
    "refused": "Nothing was run: change the request and press Run again.",
}


def esc(text: object) -> str:
    escaped = html.escape(str(text), quote=True)
    return escaped.replace("$", "&#36;").replace("{", "&#123;").replace("}", "&#125;")


def render_status(view: RunView) -> str:
    parts = [f"<style>{CSS}</style>"]  # in the page itself, so a Space's plain launch() styles it too
    if view.notice:
        parts.append(f'<div class="it-notice" data-ev="notice">{esc(view.notice)}</div>')
    parts.append(f'<p class="it-phase" data-ev="phase-{view.phase}">{esc(PHASES[view.phase])}</p>')
    if view.error:
        parts.append(f'<p class="it-error" data-ev="error" role="alert">error: {esc(view.error)}</p>')
    if view.result is not None:
        parts += [f'<p class="it-warning">warning: {esc(w)}</p>' for w in view.result.trace.warnings]
    return "\n".join(parts)


def _plan_item(step: PlanStep) -> str:
    kind = "text answer" if step.is_text_answer else "image"
    name = esc(step.step_name or f"Step {step.step_number}")
    what = step.generation_prompt or step.auxiliary_text or ""
    return f'<li data-ev="plan-step-{step.step_number}"><b>{name}</b> <i>({kind})</i>: {esc(what)}</li>'


def render_plan(view: RunView) -> str:
    if view.plan is None:
        return ""
    note = " <i>(single-step fallback: the planner gave no valid plan)</i>" if view.plan.fallback else ""
    items = "".join(_plan_item(s) for s in view.plan.steps)
    return f'<div class="it-plan" data-ev="plan"><h3>Plan{note}</h3><ol>{items}</ol></div>'


def _verdict(step: int, record: Attempt) -> str:
    key = f"{step}-{record.attempt}"
    if record.generation_error:
        return (
            f'<p data-ev="verdict-{key}" class="it-bad">generation failed: {esc(record.generation_error)}</p>'
        )
    if record.forced:
        state = "accepted: last attempt (no critic call)" if not record.critic_called else "kept: last image"
        return f'<p data-ev="verdict-{key}" class="it-forced">{state}</p>'
    if record.verdict is None:
        error = esc(record.critic_error or "no reply")
        return f'<p data-ev="verdict-{key}" class="it-bad">the critic gave no valid verdict: {error}</p>'
    verdict = record.verdict
    label = "accepted by the critic" if verdict.success else "rejected by the critic"
    parts = [f'<p data-ev="verdict-{key}" class="{"it-good" if verdict.success else "it-bad"}">{label}</p>']
    if verdict.reasoning:
        parts.append(f'<pre data-ev="reasoning-{key}">{esc(verdict.reasoning)}</pre>')
    if not verdict.success and verdict.refine_prompt.strip():
        parts.append(f'<p data-ev="refine-{key}"><b>Refined prompt:</b> {esc(verdict.refine_prompt)}</p>')
    return "".join(parts)


UNFINISHED = {
    "cancelled": "stopped: Stop was pressed before this attempt finished.",
    "error": "not finished: the run stopped.",
}
"""What an attempt without a verdict says once its run has ended (it no longer says "generating…")."""


def _attempt(view: AttemptView, run_phase: str) -> str:
    key = f"{view.step}-{view.attempt}"
    parts = [
        f'<div class="it-attempt" data-ev="attempt-{key}"><div class="it-meta">attempt {view.attempt + 1}'
    ]
    parts.append(f"</div><p><b>Prompt:</b> {esc(view.prompt)}</p>")
    if view.thumb:
        parts.append(
            f'<img data-ev="image-{key}" src="{view.thumb}" alt="step {view.step} attempt {view.attempt + 1}">'
        )
    if view.record is not None:
        parts.append(_verdict(view.step, view.record))
    elif run_phase in UNFINISHED:
        parts.append(f'<p class="it-meta" data-ev="unfinished-{key}">{UNFINISHED[run_phase]}</p>')
    elif view.phase == "reviewing":
        parts.append('<p class="it-meta">the critic is checking this image…</p>')
    else:
        parts.append('<p class="it-meta">generating…</p>')
    parts.append("</div>")
    return "".join(parts)


def render_live(view: RunView) -> str:
    if view.plan is None:
        return ""
    sections = []
    for index, step in enumerate(view.plan.steps, start=1):
        title = esc(step.step_name or f"Step {index}")
        parts = [f'<section class="it-step" data-ev="step-{index}"><h4>{index}. {title}</h4>']
        parts += [_attempt(a, view.phase) for a in view.attempts_of(index)]
        record = view.steps.get(index)
        if record is not None:
            state = "accepted image: " + esc(record.accepted_image) if record.accepted_image else "text step"
            parts.append(f'<p data-ev="step-done-{index}" class="it-meta">{state}</p>')
            if record.kind == "text" and record.text:
                parts.append(f'<p data-ev="answer-{index}">{esc(record.text)}</p>')
        parts.append("</section>")
        sections.append("".join(parts))
    return '<div class="it-live">' + "".join(sections) + "</div>"


def render_final(view: RunView) -> str:
    """The interleaved page: request, input images, then each step's text and accepted image in order."""
    result = view.result
    if result is None:
        return ""
    trace = result.trace
    parts = [f'<article class="it-final" data-ev="final"><h2>{esc(trace.request.text)}</h2>']
    inputs = [result.images[n] for n in trace.input_images if n in result.images]
    parts += [
        f'<img class="it-input" data-role="input" src="{data_uri(im)}" alt="input image">' for im in inputs
    ]
    for index, step in enumerate(trace.steps, start=1):
        parts.append(f"<h3>{index}. {esc(step.step.step_name or f'Step {index}')}</h3>")
        if step.text:
            parts.append(f"<p>{esc(step.text)}</p>")
        image = result.images.get(step.accepted_image) if step.accepted_image else None
        if image is not None:
            parts.append(
                f'<img class="it-page-image" data-role="step" src="{data_uri(image, PAGE_SIDE)}" alt="step {index}">'
            )
    parts.append("</article>")
    return "".join(parts)


CSS = """
.it-notice{background:#fff4d6;border:1px solid #e0b84c;padding:.5rem .8rem;border-radius:6px;color:#222}
.it-error{color:#b00020;font-weight:600}
.it-attempt{border:1px solid #ddd;border-radius:6px;padding:.4rem .6rem;margin:.4rem 0}
.it-attempt img{width:160px;image-rendering:pixelated}
.it-final img{max-width:100%;min-width:256px;image-rendering:pixelated;display:block;margin:.4rem 0}
.it-meta{color:#666;font-size:.85rem}
.it-good{color:#1b7f3b}.it-bad{color:#b00020}.it-forced{color:#9a6700}
.it-attempt pre{white-space:pre-wrap;font-size:.8rem}
"""
