"""WISE's judge prompts (the chat messages of its scorers at the pinned commit), and the official filling."""

from __future__ import annotations

from interleave_thinker.eval.prompts import EvalPrompt, Repo

REPO = Repo("PKU-YuanGroup/WISE", "eb51174483a5de2e34e8614cf9dfb3319ee7fcd0")
_VERIFIED, _LEGACY, _MESSAGES = "vllm_eval.py", "WISE_legacy/gpt_eval.py", "build_evaluation_messages"


def _message(source: str, sha: str, index: int) -> EvalPrompt:
    return EvalPrompt(REPO, source, "message", _MESSAGES, sha, index)


VERIFIED_PROMPTS = {
    "wise_verified_system": _message(
        _VERIFIED, "c9b9e5e189408801a05c600dfc385addc37bb1ebe9b933c74202ea72eb415f8c", 0
    ),
    "wise_verified_user": _message(
        _VERIFIED, "b72932ce0313711651a182fc57a89c66393f9e4d7030ce24ca2c403f1aec1ae2", 1
    ),
}
LEGACY_PROMPTS = {
    "wise_legacy_system": _message(
        _LEGACY, "1034e394de55d899eb78e5ad09835de551cefa5bfeb0ba4bf452c83f6285ffc0", 0
    ),
    "wise_legacy_user": _message(
        _LEGACY, "76f6efe6506725cf2aaf3860f0595deb29e68b57649d9a584712fbd39da9bb54", 1
    ),
}
PROMPT_FIELD = "{prompt_data['Prompt']}"
EXPLANATION_FIELD = "{prompt_data['Explanation']}"


def fill(template: str, prompt: object, explanation: object) -> str:
    """The f-string evaluated with the record: split on the two fields (Prompt first), join the values."""
    head, rest = template.split(PROMPT_FIELD, 1)
    middle, tail = rest.split(EXPLANATION_FIELD, 1)
    return head + format(prompt, "") + middle + format(explanation, "") + tail
