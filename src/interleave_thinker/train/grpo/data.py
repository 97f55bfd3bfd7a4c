"""GRPO prompt sets: the release's critic RL files, planner requests, and synthetic sets for tiny runs.

The synthetic critic set makes the correct verdict recoverable from the prompt: the step's instruction
ends in ``[ok]`` or ``[bad]``, and the "after" image is reddish for ``[ok]`` and bluish for ``[bad]`` at
one brightness, so the format-trained tiny critic (which answers the same whatever it sees) starts at
chance. With ``restate=True`` the instruction is also the prompt's last line, next to where the reply
starts, which a three-layer tiny model can learn to read within minutes; that layout is new to the
format-trained critic, so it needs a short SFT warm start (:func:`warm_start_examples`) first.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker.agents.messages import fill
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.train.data.examples import ChatTurn, CriticRLExample, GroundTruth, SFTExample
from interleave_thinker.train.data.loaders import load_critic_rl, load_sft
from interleave_thinker.train.data.trl_format import datasets_module, rl_dataset

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


def critic_dataset(files: list[Path], image_dir: Path | None) -> Any:
    examples = [e for path in files for e in load_critic_rl(path, image_dir=image_dir)]
    return rl_dataset(examples)


def planner_dataset(requests: list[str], templates: TemplateSet) -> Any:
    """Narrative planner prompts as TRL conversational rows, with the raw request for the plan reward."""
    from interleave_thinker.agents.planner import narrative_planner_messages

    rows = []
    for request in requests:
        text = narrative_planner_messages(templates, request)[0]["content"][0]["text"]
        rows.append({"prompt": [{"role": "user", "content": text}], "request": request})
    return datasets_module().Dataset.from_list(rows)


def planner_requests_from_files(files: list[Path], image_dir: Path | None) -> list[str]:
    """The user turns of planner SFT files, used as GRPO prompts (their targets are not needed)."""
    requests = []
    for path in files:
        for example in load_sft(path, image_dir=image_dir, role="planner"):
            if not example.images:
                requests.append(example.messages[0].content)
    return requests
