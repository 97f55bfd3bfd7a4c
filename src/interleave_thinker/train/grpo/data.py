"""GRPO prompt sets: the release's critic RL files, planner requests, and synthetic sets for tiny runs.

The synthetic critic set encodes the correct verdict in the step's instruction (``[ok]`` / ``[bad]``),
so a learning test can check that GRPO moves the critic towards it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker.core.messages import fill
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.train.data.examples import CriticRLExample, GroundTruth
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


def synthetic_critic_examples(
    templates: TemplateSet, n: int, image_dir: Path, *, seed: int = 0
) -> list[CriticRLExample]:
    rng = random.Random(seed)
    image_dir.mkdir(parents=True, exist_ok=True)
    before = image_dir / "white.png"
    Image.new("RGB", (64, 64), "white").save(before)
    examples = []
    for i in range(n):
        success = i % 2 == 0
        subject = rng.choice(SUBJECTS)
        instruction = f"{subject} [{'ok' if success else 'bad'}]"
        after = image_dir / f"after_{i}.png"
        Image.new("RGB", (64, 64), (rng.randrange(256), rng.randrange(256), rng.randrange(256))).save(after)
        text = fill(templates.get("critic"), original_instruction=instruction, rewritten_prompt=instruction)
        examples.append(
            CriticRLExample(
                problem="<image><image>" + text,
                images=(before, after),
                origin_prompt=instruction,
                origin_image_path=before,
                edited_image_path=after,
                previous_prompt=instruction,
                ground_truth=GroundTruth(success, 8.0 if success else 3.0, 7.0),
            )
        )
    return examples


def critic_dataset(files: list[Path], image_dir: Path | None) -> Any:
    examples = [e for path in files for e in load_critic_rl(path, image_dir=image_dir)]
    return rl_dataset(examples)


def planner_dataset(requests: list[str], templates: TemplateSet) -> Any:
    """Narrative planner prompts as TRL conversational rows, with the raw request for the plan reward."""
    from interleave_thinker.core.messages import narrative_planner_messages

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
