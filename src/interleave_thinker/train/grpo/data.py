"""GRPO prompt sets: the release's critic RL files, planner requests (``planner_rl`` files, narrative and
guidance, or planner SFT user turns), and synthetic sets for tiny runs.

The synthetic critic set makes the correct verdict recoverable from the prompt: the step's instruction
ends in ``[ok]`` or ``[bad]``, and the "after" image is reddish for ``[ok]`` and bluish for ``[bad]`` at
one brightness, so the format-trained tiny critic (which answers the same whatever it sees) starts at
chance. With ``restate=True`` the instruction is also the prompt's last line, next to where the reply
starts, which a three-layer tiny model can learn to read within minutes; that layout is new to the
format-trained critic, so it needs a short SFT warm start (:func:`warm_start_examples`) first.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker.agents.messages import fill
from interleave_thinker.agents.planner import GUIDANCE_TEMPLATE, NARRATIVE_TEMPLATE, UEVAL_SUFFIX
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.train.data.examples import (
    ChatTurn,
    CriticRLExample,
    GroundTruth,
    PlannerRLExample,
    SFTExample,
)
from interleave_thinker.train.data.loaders import load_critic_rl, load_planner_rl, load_sft
from interleave_thinker.train.data.trl_format import content_parts, datasets_module, rl_dataset

SUBJECTS = (
    "a red cube",
    "a sitting cat",
    "a paper boat",
    "a lighthouse",
    "a bowl of fruit",
    "a bicycle",
    "a kite",
)
HELD_OUT_SUBJECTS = (
    "a green teapot",
    "a sleeping dog",
    "a wooden chair",
    "a windmill",
    "a stack of books",
    "a hot-air balloon",
    "an umbrella",
)


def _save_atomic(image: Image.Image, path: Path) -> None:
    """Write through a temporary file and rename: under several processes every rank writes the same
    bytes, and a rank reading an image while another writes it still sees a complete file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    image.save(tmp, format="PNG")
    os.replace(tmp, path)


def synthetic_critic_examples(
    templates: TemplateSet,
    n: int,
    image_dir: Path,
    *,
    seed: int = 0,
    subjects: tuple[str, ...] = SUBJECTS,
    restate: bool = False,
) -> list[CriticRLExample]:
    """``n`` critic prompts, half correct; ``subjects=HELD_OUT_SUBJECTS`` gives prompts no train row has."""
    rng = random.Random(seed)
    image_dir.mkdir(parents=True, exist_ok=True)
    before = image_dir / "white.png"
    _save_atomic(Image.new("RGB", (64, 64), "white"), before)
    examples = []
    for i in range(n):
        success = i % 2 == 0
        subject = rng.choice(subjects)
        instruction = f"{subject} [{'ok' if success else 'bad'}]"
        after = image_dir / f"after_{i}.png"
        jitter = rng.randrange(-20, 21)
        colour = (160 + jitter, 90, 90) if success else (90, 90, 160 + jitter)
        _save_atomic(Image.new("RGB", (64, 64), colour), after)
        text = fill(templates.get("critic"), original_instruction=instruction, rewritten_prompt=instruction)
        examples.append(
            CriticRLExample(
                problem="<image><image>" + text + (f"\n{instruction}" if restate else ""),
                images=(before, after),
                origin_prompt=instruction,
                origin_image_path=before,
                edited_image_path=after,
                previous_prompt=instruction,
                ground_truth=GroundTruth(success, 8.0 if success else 3.0, 7.0),
            )
        )
    return examples


def warm_start_examples(examples: list[CriticRLExample]) -> list[SFTExample]:
    """SFT conversations that answer RL prompts with their ground-truth verdict and an empty refine prompt.

    A short SFT on these before GRPO gives a tiny critic a clean, short reply whose only open choice is
    the verdict, so the group's rewards differ by accuracy rather than by broken formatting.
    """
    from interleave_thinker.train.synthetic import FAILURE_REASONING, SUCCESS_REASONING, verdict_reply

    return [
        SFTExample(
            messages=(
                ChatTurn("user", e.problem),
                ChatTurn(
                    "assistant",
                    verdict_reply(
                        e.ground_truth.success,
                        "",
                        SUCCESS_REASONING if e.ground_truth.success else FAILURE_REASONING,
                    ),
                ),
            ),
            images=e.images,
        )
        for e in examples
    ]


RELEASE_RL_IMAGES = "<image><image>\n"
"""The line the release's RL prompt puts before the critic template (``verl/utils/system.py``)."""


def release_rl_prompt(templates: TemplateSet, origin_prompt: str, rewritten_prompt: str) -> str:
    """The critic's GRPO prompt as the release's RL dataset builds it (``verl/utils/dataset.py:155-173``):
    an ``<image><image>`` line and the critic template (``system.py`` holds it between those and a newline,
    and the whole is stripped: the released ``critic.txt`` stripped), with ``{original_instruction}`` and
    ``{rewritten_prompt}`` replaced (plain replacement)."""
    text = RELEASE_RL_IMAGES + templates.get("critic").strip()
    return fill(text, original_instruction=origin_prompt, rewritten_prompt=rewritten_prompt)


def as_released(example: CriticRLExample, templates: TemplateSet) -> CriticRLExample:
    """``example`` with the release's prompt and images ``[origin_image_path, edited_image_path]``; a row
    without ``edited_image_path`` keeps its second image (the release refuses such a row)."""
    from dataclasses import replace

    problem = release_rl_prompt(templates, example.origin_prompt, example.previous_prompt)
    after = example.edited_image_path or example.images[-1]
    return replace(example, problem=problem, images=(example.origin_image_path, after))


def critic_dataset(files: list[Path], image_dir: Path | None, templates: TemplateSet | None = None) -> Any:
    """The critic_rl rows as TRL prompts: with ``templates``, each prompt rebuilt as the release's RL dataset
    builds it (:func:`as_released`; ``data.critic_prompt: template``), else the row's ``problem``."""
    examples = [e for path in files for e in load_critic_rl(path, image_dir=image_dir)]
    if templates is not None:
        examples = [as_released(e, templates) for e in examples]
    return rl_dataset(examples)


def planner_prompt_text(templates: TemplateSet, example: PlannerRLExample) -> str:
    """The planner's user turn as the pipeline builds it: the guidance template when the request has
    images (its ``<image>`` markers kept, one per image), else the narrative one."""
    if example.images:
        return fill(templates.get(GUIDANCE_TEMPLATE), text_input=example.text_input)
    return fill(templates.get(NARRATIVE_TEMPLATE), text_input=example.text_input.replace(UEVAL_SUFFIX, ""))


def planner_dataset(examples: Sequence[PlannerRLExample], templates: TemplateSet) -> Any:
    """Planner prompts as TRL conversational rows: ``prompt`` (text parts and image placeholders in the
    release's guidance layout), ``images``, the raw ``request`` for the plan checks and ``plan_score``
    (None when the row has none) for :func:`~interleave_thinker.train.rewards.planner.planner_score_reward`.

    Text-only and image-bearing requests are refused together: TRL's ``GRPOTrainer`` hands the processor
    ``None`` for the text-only rows of a mixed batch, which fails mid-training (tried with TRL 1.16 and the
    tiny Qwen3-VL planner); one kind per run works."""
    guidance = sum(1 for e in examples if e.images)
    if 0 < guidance < len(examples):
        raise ConfigError(
            f"Planner GRPO prompts mix {len(examples) - guidance} text-only and {guidance} image-bearing "
            "request(s), which TRL cannot batch together; train each kind in its own run (split data.train)."
        )
    ds = datasets_module()
    turn = {"role": ds.Value("string"), "content": [{"type": ds.Value("string"), "text": ds.Value("string")}]}
    features = ds.Features(
        {
            "prompt": [turn],
            "images": ds.Sequence(ds.Image()),
            "request": ds.Value("string"),
            "plan_score": ds.Value("float64"),
        }
    )
    rows = [
        {
            "prompt": [{"role": "user", "content": content_parts(planner_prompt_text(templates, e))}],
            "images": [str(p) for p in e.images],
            "request": e.text_input,
            "plan_score": e.plan_score,
        }
        for e in examples
    ]
    return ds.Dataset.from_dict({name: [row[name] for row in rows] for name in features}, features=features)


def request_from_user_turn(templates: TemplateSet, text: str) -> str:
    """The request inside a planner SFT user turn that already holds a filled template (exact inverse of
    the plain replacement), or the turn itself when it holds none, so no prompt is templated twice."""
    for name in (GUIDANCE_TEMPLATE, NARRATIVE_TEMPLATE):
        head, _, tail = templates.get(name).partition("{text_input}")
        if len(text) >= len(head) + len(tail) and text.startswith(head) and text.endswith(tail):
            return text[len(head) : len(text) - len(tail)]
    return text


def _first_record(path: Path) -> Any:
    """The first record of a JSON list or JSONL file (only it is decoded), to tell the file's kind."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # the loader says what is wrong with the file
    start = len(text) - len(text.lstrip())
    if text[start : start + 1] == "[":
        start = len(text) - len(text[start + 1 :].lstrip())
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError:
        return None  # the loader reports it, with its line


def planner_examples_from_files(
    files: list[Path], image_dir: Path | None, templates: TemplateSet
) -> list[PlannerRLExample]:
    """Planner GRPO requests from ``planner_rl`` files, or from the user turns (and images) of planner SFT
    files (records with ``messages`` / ``conversations``; their targets are not needed)."""
    examples: list[PlannerRLExample] = []
    for path in files:
        first = _first_record(path)
        if isinstance(first, dict) and ("messages" in first or "conversations" in first):
            for sft in load_sft(path, image_dir=image_dir, role="planner"):
                user = next(t.content for t in sft.messages if t.role == "user")
                examples.append(PlannerRLExample(request_from_user_turn(templates, user), sft.images))
        else:
            examples.extend(load_planner_rl(path, image_dir=image_dir))
    return examples
