"""One trace as the release's interleaved sequence ("easy" or "hard"), or the reason it is left out.

The assistant turn reads ``<gthink>plan reasoning</gthink>`` and then, per step, ``<plan>prompt</plan>``,
one ``<image>`` marker per shown image and, when the plan gives one, ``<info>auxiliary text</info>``.
"easy" shows only the image each step kept, under the prompt that made it (the critic's refinement
when the step was retried); "hard" shows the planned prompt and then every attempt in order, each
image followed by ``<critic><think>critic reasoning</think>{verdict}</critic>``. Both keep only
trajectories whose every image step ended with an image the critic approved. A text step (guidance
"Task A": no prompt, the answer in ``auxiliary_text``) shows only its ``<info>`` block.

Every text a model wrote goes through :func:`inert`, so the only tags and ``<image>`` markers of a
sequence are the ones placed here: closing tags always match and marker count equals image count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from interleave_thinker.agents.messages import count_image_markers
from interleave_thinker.core.run_folder import TRACE_FILE, run_image
from interleave_thinker.core.types import Attempt, Plan, StepRecord, Trace, Verdict
from interleave_thinker.core.untrusted import ImageLimits, Kind
from interleave_thinker.runtime.fallbacks import FALLBACKS_ONLY

Format = Literal["interleaved-easy", "interleaved-hard"]
FORMATS: tuple[Format, ...] = ("interleaved-easy", "interleaved-hard")
TAGS = ("gthink", "plan", "info", "critic", "think", "image")
IMAGE = "<image>"
_RESERVED = re.compile(r"<(/?)(" + "|".join(TAGS) + r")(?=[\s/>]|$)", re.IGNORECASE)

DROP_REASONS: dict[str, str] = {
    "unreadable": "trace.json could not be read (not JSON, too large, nested too deep, not a trace), or "
    "its input images do not match its <image> markers",
    "no_plan": "the planner gave no valid plan (planning failed or the single-step fallback was used)",
    "unfinished": "the run did not finish (status not 'succeeded', or fewer steps than planned)",
    "fallbacks_only": "`data generate` failed the request: the critic gave no verdict on any attempt or the "
    "judge scored none (trace.json 'error')",
    "step_failed": "an image step kept no image",
    "step_not_approved": "an image step kept an image the critic did not approve (rejected, forced, no verdict)",
    "attempt_without_verdict": "hard only: an attempt's image has no critic verdict to follow it",
    "missing_image": "an image named by the trace is not in the run's images/ folder",
    "unsafe_path": "the trace names a file outside its run folder (an absolute path, '..' or a symbolic "
    "link out), or the run folder itself is a link out of --input",
    "bad_image": "an image named by the trace is not an image file, or is over the byte or pixel limit",
}
"""Every reason a trajectory is left out, as counted in the export's stats."""


@dataclass(frozen=True)
class Interleaved:
    """One trajectory as a user turn and an assistant turn; ``images`` in marker order (inputs first)."""

    user: str
    assistant: str
    images: tuple[Path, ...]


def inert(text: str) -> str:
    """``text`` with our tags and the image marker made plain text (``<plan>`` -> ``&lt;plan>``).

    >>> inert("see <image> then </plan><planet>")
    'see &lt;image> then &lt;/plan><planet>'
    """
    return _RESERVED.sub(lambda m: "&lt;" + m.group(1) + m.group(2), text)


def block(tag: str, text: str) -> str:
    """``<tag>`` on its own line, the text, ``</tag>``: the release's layout, with a real closing tag."""
    return f"<{tag}>\n{inert(text.strip())}\n</{tag}>\n"


def verdict_text(verdict: Verdict) -> str:
    """The critic's verdict as the authors' reflection export writes it: one JSON object.

    >>> verdict_text(Verdict(success=False, refine_prompt="a red cube"))
    '{"success": false, "refine_prompt": "a red cube"}'
    """
    return json.dumps(
        {"success": verdict.success, "refine_prompt": verdict.refine_prompt}, ensure_ascii=False
    )


def critic_block(verdict: Verdict) -> str:
    inner = block("think", verdict.reasoning or "") + inert(verdict_text(verdict)) + "\n"
    return f"<critic>\n{inner}</critic>\n"


def _info(record: StepRecord) -> str:
    text = record.step.auxiliary_text
    return block("info", text) if text is not None and text.strip() not in ("", "None") else ""


def _image_step(record: StepRecord, where: str, hard: bool) -> tuple[str, list[tuple[str, str]]] | str:
    """The step's text and images (each name with the trace field naming it), or why the trajectory is
    left out."""
    kept = next((a for a in record.attempts if a.accepted and a.image_file), None)
    if kept is None:
        return "step_failed"
    if kept.verdict is None or not kept.verdict.success:
        return "step_not_approved"
    shown: list[Attempt] = [a for a in record.attempts if a.image_file] if hard else [kept]
    if any(a.verdict is None for a in shown):
        return "attempt_without_verdict"
    planned = record.planned_prompt if record.planned_prompt is not None else record.step.generation_prompt
    parts = [block("plan", (planned or kept.prompt) if hard else kept.prompt)]
    for attempt in shown:
        parts.append(IMAGE + "\n")
        if hard and attempt.verdict is not None:
            parts.append(critic_block(attempt.verdict))
    parts.append(_info(record))
    named = [(str(a.image_file), f"{where}.attempts[{record.attempts.index(a)}].image_file") for a in shown]
    return "".join(parts), named


def _usable(trace: Trace) -> Plan | str:
    """The trace's plan, or why the trajectory is left out."""
    plan = trace.planner.plan
    if plan is None or plan.fallback:
        return "no_plan"
    if trace.status == "failed" and (trace.error or "").startswith(FALLBACKS_ONLY):
        return "fallbacks_only"
    if trace.status != "succeeded" or len(trace.steps) < len(plan.steps):
        return "unfinished"
    if count_image_markers(trace.request.text) != len(trace.input_images):
        return "unreadable"
    return plan


def interleave(trace: Trace, run: Path, fmt: Format, limits: ImageLimits | None = None) -> Interleaved | str:
    """The trajectory of the run folder ``run`` in format ``fmt``, or a key of :data:`DROP_REASONS`.

    Every image the trajectory shows is checked as data (:func:`~interleave_thinker.core.run_folder.run_image`);
    one that is not a plain image file inside the run raises
    :class:`~interleave_thinker.core.untrusted.UnsafeFile` with its reason."""
    plan = _usable(trace)
    if isinstance(plan, str):
        return plan
    parts = [block("gthink", plan.reasoning or "")]
    named = [(name, f"input_images[{i}]") for i, name in enumerate(trace.input_images)]
    for index, record in enumerate(trace.steps):
        if record.kind == "text":
            parts.append(block("info", record.text or record.step.auxiliary_text or ""))
            continue
        step = _image_step(record, f"steps[{index}]", fmt == "interleaved-hard")
        if isinstance(step, str):
            return step
        parts.append(step[0])
        named.extend(step[1])
    trace_file = run / TRACE_FILE
    images = tuple(run_image(run, name, what=f"{trace_file} {field}", limits=limits) for name, field in named)
    return Interleaved(trace.request.text, "".join(parts).rstrip("\n"), images)


REASON_OF_KIND: dict[Kind, str] = {
    "unsafe_path": "unsafe_path",
    "missing": "missing_image",
    "too_large": "bad_image",
    "not_an_image": "bad_image",
    "too_deep": "unreadable",
}
"""The drop reason of each :class:`UnsafeFile` kind an image check raises."""
