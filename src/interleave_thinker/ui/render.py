"""HTML for the page: status, plan, live steps and the final interleaved page.

Everything a model (or a visitor) wrote is escaped here; ``$``, ``{`` and ``}`` too, because Gradio's
HTML component passes its value through a template engine. Elements carry ``data-ev`` names so a
browser test can tell what appeared, and in which order.
"""

from __future__ import annotations

import html

from interleave_thinker.core.types import Attempt, PlanStep, StepRecord
from interleave_thinker.runtime.opt_in import ranked_attempts, repair_note, review_note, selection_note
from interleave_thinker.ui.live import AttemptView, RunView

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
    parts = [f"<style>{CSS}</style>"]
    if view.notice:
        parts.append(f'<div class="it-notice" data-ev="notice">{esc(view.notice)}</div>')
    parts.append(f'<p class="it-phase" data-ev="phase-{view.phase}">{esc(PHASES[view.phase])}</p>')
    if view.redo:
        parts.append(f'<p class="it-meta" data-ev="redo">{esc(view.redo)}</p>')
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
    tiny = ""
    if view.tiny_plan and not view.plan.fallback:
        tiny = f'<p class="it-notice" data-ev="tiny-plan">{esc(view.tiny_plan)}</p>'

    return f'<div class="it-plan" data-ev="plan"><h3>Plan{note}</h3>{tiny}<ol>{items}</ol></div>'


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
    """One attempt, labelled as its file is named: attempts count from 0 (``step01_attempt0.png``)."""
    key = f"{view.step}-{view.attempt}"
    label = f"attempt {view.attempt}"
    if view.record is not None and view.record.image_file:
        label += f" · {esc(view.record.image_file)}"
    parts = [f'<div class="it-attempt" data-ev="attempt-{key}"><div class="it-meta">{label}']
    parts.append(f"</div><p><b>Prompt:</b> {esc(view.prompt)}</p>")
    if view.thumb:
        parts.append(
            f'<img data-ev="image-{key}" src="{view.thumb}" alt="step {view.step} attempt {view.attempt}">'
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


def _selection(index: int, record: StepRecord) -> str:
    """What ``loop.select_best`` kept at this step, and the critic's ranking (best first) when it ranked."""
    note = selection_note(record)
    if note is None:
        return ""
    ranked = ", ".join(f"attempt {a.attempt}" for a in ranked_attempts(record))
    order = f'<br><span data-ev="ranking-{index}">ranking, best first: {esc(ranked)}</span>' if ranked else ""
    return f'<p data-ev="selection-{index}" class="it-feature">{esc(note)}{order}</p>'


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
            parts.append(_selection(index, record))
            if record.kind == "text" and record.text:
                parts.append(f'<p data-ev="answer-{index}">{esc(record.text)}</p>')
        parts.append("</section>")
        sections.append("".join(parts))
    return '<div class="it-live">' + "".join(sections) + "</div>"


def render_final(view: RunView) -> str:
    """The interleaved page's text: the request, then each step's name and text in order. Its
    pictures are not repeated here: they are in the gallery beside it (lightbox, download), each
    captioned with its step and named by its file, as this page names it."""
    result = view.result
    if result is None:
        return ""
    trace = result.trace
    parts = [f'<article class="it-final" data-ev="final"><h2>{esc(trace.request.text)}</h2>']
    if trace.input_images:
        names = ", ".join(esc(n) for n in trace.input_images)
        parts.append(f'<p class="it-meta" data-role="inputs">input images (in the gallery): {names}</p>')
    repairs = {r.step_number: r for r in trace.repair.steps} if trace.repair is not None else {}
    for index, step in enumerate(trace.shown_steps(), start=1):
        parts.append(f"<h3>{index}. {esc(step.step.step_name or f'Step {index}')}</h3>")
        if step.text:
            parts.append(f"<p>{esc(step.text)}</p>")
        if step.accepted_image:
            parts.append(
                f'<p class="it-meta" data-role="picture">picture: {esc(step.accepted_image)} (in the gallery)</p>'
            )
        if index in repairs:  # the repaired picture beside the original it replaced (both in the gallery)
            fixed = repairs[index]
            note = f"flagged by the review: {fixed.reason} {repair_note(fixed)}"
            parts.append(f'<p class="it-feature" data-ev="repair-{index}">{esc(note)}</p>')
    if trace.repair is not None:
        parts.append(f'<p class="it-feature" data-ev="review">{esc(review_note(trace.repair))}</p>')
    parts.append("</article>")
    return "".join(parts)


CSS = """
.it-notice{background:#fff4d6;border:1px solid #e0b84c;padding:.5rem .8rem;border-radius:6px;color:#222}
.it-error{color:#b00020;font-weight:600}
.it-attempt{border:1px solid #ddd;border-radius:6px;padding:.4rem .6rem;margin:.4rem 0}
.it-attempt img{width:160px;max-width:100%;image-rendering:pixelated}
.it-meta{color:#666;font-size:.85rem}
.it-feature{background:#eef6ee;border-left:3px solid #3a7d44;padding:.3rem .6rem;color:#222}
.it-good{color:#1b7f3b}.it-bad{color:#b00020}.it-forced{color:#9a6700}
.it-attempt pre{white-space:pre-wrap;font-size:.8rem}
#it-status,#it-plan,#it-live,#it-final,#it-gallery{overflow-wrap:anywhere;min-width:0}
#it-examples table{table-layout:fixed;width:100%}
#it-examples th,#it-examples td{overflow-wrap:anywhere;white-space:normal}
#it-gallery img{image-rendering:pixelated}
#it-gallery caption{white-space:normal;max-width:100%;overflow-wrap:anywhere}
#it-gallery .grid-wrap.fixed-height{height:auto;min-height:0;max-height:none}
@media (max-width:480px){#it-gallery .grid-container{--grid-cols:2 !important}}
"""
"""In the status pane's ``<style>``, so a Space's plain ``launch()`` styles the page too. Long words
(a URL, a model's run-on token) wrap instead of being cut off at a phone's 390 px."""
