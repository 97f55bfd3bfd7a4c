"""Our own templates of the loop's opt-in agents (the attempt ranking, the sequence review).

They live in ``prompts/loop/``, a folder of their own, so the built-in template set (every ``*.txt`` of
``prompts/``) stays the released set and its digests in every trace stay as they were. No released
template exists for these agents: the texts are ours, and a trace records each one's SHA-256.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources


@functools.cache
def loop_template(name: str) -> str:
    """The text of ``prompts/loop/<name>.txt``."""
    folder = resources.files("interleave_thinker.prompts") / "loop"
    return (folder / f"{name}.txt").read_text(encoding="utf-8")


def loop_template_digest(name: str) -> str:
    """SHA-256 of the template's text, as a trace records it."""
    return hashlib.sha256(loop_template(name).encode("utf-8")).hexdigest()
