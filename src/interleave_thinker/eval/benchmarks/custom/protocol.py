"""``custom``: your own questions with your own rubric, scored UEval-style by any judge.

Data: a JSONL (or JSON list, Parquet) file of ``{"id", "prompt", "category"?, "text_rubrics": [...],
"image_rubrics": [...]}``, each rubric a yes/no question about the answer's text or its images (at least
one per item). Generation writes a UEval-style ``submission.json``; each rubric is one judge question,
asked with the texts below (ours), answered with ``{"criteria_met": true|false, "explanation": ...}``;
rates and the average are UEval's. There is no official judge: compare runs judged by the same one.
"""

from __future__ import annotations

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.benchmark import Benchmark, Protocol, ScoreContext, Scorer
from interleave_thinker.eval.benchmarks.ueval.protocol import MODE_FLAG, RUBRIC_REPORT, rubric_scorer
from interleave_thinker.eval.benchmarks.ueval.scorer import MODES
from interleave_thinker.eval.datasets import EvalItem, load_questions
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.prompts import PromptSet

NAME = "custom"
PREFIX = "custom_"
_REPLY = 'Reply with one JSON object and nothing else: {"criteria_met": true or false, "explanation": "why, in one sentence"}.'
TEXTS = {
    "system_instruction": "You check one answer against one rubric question at a time. Be strict: a "
    "question is met only when the answer clearly satisfies it. " + _REPLY,
    "text_template": "The request was:\n<<question>>\n\nThe answer's text is:\n<<text_answer>>\n\n"
    "Judge the text only.",
    "text_rubric_template": "Rubric question: <<rubric_item>>\n" + _REPLY,
    "image_template_open": "The request was:\n<<question>>\n\nThe answer's text is:\n<<text_answer>>\n\n"
    "Judge the answer's images (attached), read with its text.",
    "image_template_closed": "The request was:\n<<question>>\n\nJudge the answer's images (attached).",
    "image_rubric_template": "Rubric question: <<rubric_item>>\n" + _REPLY,
}
"""Our own words (no benchmark's text): the same placeholders and roles as UEval's prompts."""


def prompts() -> PromptSet:
    return PromptSet({PREFIX + role: text for role, text in TEXTS.items()}, f"built in ({__name__})")


def load(data: str) -> list[EvalItem]:
    """The items, each with at least one rubric question (an item nothing can be asked about is refused)."""
    items = load_questions(data, NAME, "category")
    for item in items:
        if not (item.raw.get("text_rubrics") or item.raw.get("image_rubrics")):
            raise InputError(
                f"{item.where}: text_rubrics, image_rubrics: a {NAME} item needs at least one rubric question."
            )
    return items


def _scorer(ctx: ScoreContext) -> Scorer:
    return rubric_scorer(ctx, PREFIX)


PROTOCOL = Protocol(
    name=NAME,
    official_judge=None,
    judge_settings={},
    attempts=3,
    prompts=prompts,
    scorer=_scorer,
    report=RUBRIC_REPORT,
    modes=MODES,
    mode_flag=MODE_FLAG,
)

BENCHMARK = Benchmark(
    name=NAME,
    load=load,
    layout=Layout(),
    protocols=(PROTOCOL,),
)
