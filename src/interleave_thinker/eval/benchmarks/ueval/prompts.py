"""UEval's judge prompts: ``.strip()``-ed module-level literals of its ``ueval_eval.py`` at the pinned
commit, and the official filling."""

from __future__ import annotations

from interleave_thinker.eval.prompts import EvalPrompt, Repo

REPO = Repo("zlab-princeton/UEval", "3a5b5ea2c4d2d149c41b3f06645f2fd272aca88e")
_DIGESTS = {
    "system_instruction": "151f6c52b708cef35b72f737cfd550665161f0fd3d2408b82de3f0432d651754",
    "text_template": "8bd035a476d192770211f2539714d5fb0edca6f9d566081500abe4a98008a0e2",
    "text_rubric_template": "471b64de913173510b2673ee80f904144c3ef414a3a3ecd47ab9fd746105442b",
    "image_template_open": "16634b947356b00020e91c34eb8df940479a731bb1f3d2a4a51986ac8410484b",
    "image_rubric_template": "471b64de913173510b2673ee80f904144c3ef414a3a3ecd47ab9fd746105442b",
    "image_template_closed": "1a533115d14edec3c510cf6c411c6d2f4819792aa03a6cf6eb97c846d01216b6",
}
PROMPTS = {
    f"ueval_{short}": EvalPrompt(REPO, "ueval_eval.py", "strip", short.upper(), sha)
    for short, sha in _DIGESTS.items()
}


def fill(template: str, question: str, text_answer: str | None = None, rubric: str | None = None) -> str:
    """UEval's chained ``.replace`` calls, in the official order."""
    if rubric is not None:
        return template.replace("<<rubric_item>>", rubric)
    return template.replace("<<question>>", question).replace("<<text_answer>>", text_answer or "")
