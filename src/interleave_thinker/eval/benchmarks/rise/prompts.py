"""RISEBench's judge prompts: module-level strings of its ``utils.py`` at the pinned commit, each pinned in
``prompts.json``."""

from __future__ import annotations

from interleave_thinker.eval.prompts import pinned_prompts

REPO, PROMPTS = pinned_prompts(__name__)
