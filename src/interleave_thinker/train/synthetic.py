"""Synthetic planner, critic and judge conversations in the release's output formats, generated in code.

Why: the tiny preset's models must learn the *formats* (a plan with image steps, a verdict with a
bool and a prompt, a judge's score list) offline in minutes; tests need small datasets that look like the real ones. The
requests are varied (subject, kind of task, step count) and every prompt is the project's template
set filled with the agents' message builders, so training sees exactly what the pipeline sends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from interleave_thinker.agents.critic import format_verdict
from interleave_thinker.agents.messages import CANVAS_SIZE, fill
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.types import Plan, PlanStep, Verdict
from interleave_thinker.train.data.examples import ChatTurn, SFTExample

SUBJECTS = (
    "cat",
    "dog",
    "horse",
    "bird",
    "fish",
    "tree",
    "house",
    "robot",
    "dragon",
    "castle",
    "flower",
    "boat",
    "car",
    "apple",
    "cake",
    "girl",
    "boy",
    "moon",
    "bridge",
    "ship",
)
"""Each is one token of the tiny tokenizer, so a tiny model can learn to copy it into the plan."""
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "draw": ("How to draw a {s} step by step?", ("Sketch", "Ink", "Colour", "Shade")),
    "story": ("Tell a short story about a {s} in pictures.", ("Meet", "Chase", "Rest", "Wake")),
    "build": ("Show how to build a {s} model.", ("Base", "Frame", "Paint", "Polish")),
    "grow": ("Show a {s} from young to old.", ("Young", "Grow", "Adult", "Old")),
}
"""Request pattern and the verb of each step, per kind of request."""
COUNT_WORDS = {2: "two", 3: "three", 4: "four"}
DEFAULT_STEPS = {"draw": 3, "story": 4, "build": 3, "grow": 2}


def plan_reply(steps: list[PlanStep], reasoning: str) -> str:
    """A compact planner reply: ``<think>`` then the plan dict as the release writes it (Python literal)."""
    return format_plan(Plan(steps=steps, reasoning=reasoning))


SUCCESS_REASONING = "The image matches the step."
FAILURE_REASONING = "The image is too dark and misses the step."
"""The two thoughts of synthetic critic replies (the format-trained tiny critic knows exactly these)."""


def verdict_reply(success: bool, refine_prompt: str, reasoning: str) -> str:
    return format_verdict(Verdict(success=success, refine_prompt=refine_prompt, reasoning=reasoning))


@dataclass(frozen=True)
class SyntheticRequest:
    text: str
    steps: list[PlanStep]
    reasoning: str


def synthetic_request(rng: random.Random) -> SyntheticRequest:
    """A varied request and its plan of 2-4 image steps (the count follows the request when it names one)."""
    kind = rng.choice(sorted(KINDS))
    subject = rng.choice(SUBJECTS)
    template, verbs = KINDS[kind]
    text = template.format(s=subject)
    count = DEFAULT_STEPS[kind]
    if rng.random() < 0.5:
        count = rng.choice((2, 3, 4))
        text = text.rstrip("?.") + f" Use {COUNT_WORDS[count]} steps."
    steps = [
        PlanStep(
            step_number=i + 1,
            step_name=verbs[i],
            instruction=f"{verbs[i]} the {subject}.",
            prompt=f"{verbs[i].lower()} the {subject}",
            auxiliary_text=None,
        )
        for i in range(count)
    ]
    return SyntheticRequest(text, steps, f"{COUNT_WORDS[count].capitalize()} image steps.")


def planner_examples(templates: TemplateSet, n: int, *, seed: int = 0) -> list[SFTExample]:
    """Narrative planner conversations: the filled narrative template -> a compact plan."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        request = synthetic_request(rng)
        user = fill(templates.get("planner_narrative"), text_input=request.text)
        reply = plan_reply(request.steps, request.reasoning)
        examples.append(SFTExample(messages=(ChatTurn("user", user), ChatTurn("assistant", reply))))
    return examples


def _image(
    path: Path, color: tuple[int, int, int], rng: random.Random, size: tuple[int, int] = (64, 64)
) -> Path:
    _no_link(path)
    if not path.exists():
        image = Image.new("RGB", size, color)
        pixels = image.load()
        assert pixels is not None
        for _ in range(size[0] * size[1] // 8):
            x, y = rng.randrange(size[0]), rng.randrange(size[1])
            pixels[x, y] = tuple(min(255, max(0, c + rng.randint(-60, 60))) for c in color)
        image.save(path)
    return path


def _no_link(path: Path) -> None:
    """A link planted at an image's name is removed (the image is made anew), never written through."""
    if path.is_symlink():
        path.unlink()


def _white_canvas(image_dir: Path) -> Path:
    """The blank canvas a first step is judged against (written once per folder)."""
    image_dir.mkdir(parents=True, exist_ok=True)
    white = image_dir / "white.png"
    _no_link(white)
    if not white.exists():
        Image.new("RGB", CANVAS_SIZE, (255, 255, 255)).save(white)
    return white


def _after_image(path: Path, bright: bool, rng: random.Random) -> Path:
    """A bright (the step carried out) or dark (it failed) noisy "after" image."""
    level = rng.randint(170, 240) if bright else rng.randint(15, 80)
    color = (level, rng.randint(0, 255) if bright else level // 2, level)
    return _image(path, color, rng)


def _before_image(step: PlanStep, white: Path, path: Path, rng: random.Random) -> Path:
    """The blank canvas before the first step, a grey noisy picture before any other."""
    return white if step.step_number == 1 else _image(path, (200, 200, 200), rng)


def critic_examples(templates: TemplateSet, n: int, image_dir: Path, *, seed: int = 0) -> list[SFTExample]:
    """Critic conversations ``[before, after, text]`` with True and False verdicts in equal parts.

    A bright "after" image is a success (the refine prompt repeats the prompt used); a dark one is a
    failure (the refine prompt adds to it), so the label is learnable from the image itself.
    """
    rng = random.Random(seed)
    white = _white_canvas(image_dir)
    examples = []
    for i in range(n):
        request = synthetic_request(rng)
        step = rng.choice(request.steps)
        planned = step.prompt or ""
        success = i % 2 == 0
        retry = rng.random() < 0.3
        used = planned + ", clear and detailed" if retry else planned
        after = _after_image(image_dir / f"after_{seed}_{i}.png", success, rng)
        before = _before_image(step, white, image_dir / f"before_{seed}_{i}.png", rng)
        text = fill(templates.get("critic"), original_instruction=planned, rewritten_prompt=used)
        if success:
            reply = verdict_reply(True, used, SUCCESS_REASONING)
        else:
            reply = verdict_reply(False, used + ", bright and sharp", FAILURE_REASONING)
        examples.append(
            SFTExample(
                messages=(ChatTurn("user", "<image><image>" + text), ChatTurn("assistant", reply)),
                images=(before, after),
            )
        )
    return examples


JUDGE_BRIGHT_SC, JUDGE_DARK_SC = (8, 9), (2, 4)
JUDGE_BRIGHT_PQ, JUDGE_DARK_PQ = (8, 7), (3, 2)
"""Synthetic judge scores: a bright "after" image carries the step out cleanly, a dark one does not."""
JUDGE_REASONING = {
    ("sc", True): "The picture is bright and shows the step.",
    ("sc", False): "The picture is too dark to show the step.",
    ("pq", True): "Clean and well lit.",
    ("pq", False): "Dark and murky.",
}


def judge_reply(scores: tuple[int, int], reasoning: str) -> str:
    """A judge reply in the release's answer format: a JSON object with a score list and a reason."""
    import json

    return json.dumps({"score": list(scores), "reasoning": reasoning})


def _judge_texts(templates: TemplateSet, instruction: str) -> tuple[str, str]:
    """The SC and PQ texts exactly as ``agents.judge`` builds them for the judge."""
    from interleave_thinker.agents.judge import judge_quality_messages, judge_semantic_messages

    dot = Image.new("RGB", (1, 1))
    sc = judge_semantic_messages(templates, before=dot, after=dot, instruction=instruction)
    pq = judge_quality_messages(templates, after=dot)
    return str(sc[0]["content"][-1]["text"]), str(pq[0]["content"][-1]["text"])


def judge_examples(templates: TemplateSet, n: int, image_dir: Path, *, seed: int = 0) -> list[SFTExample]:
    """Judge conversations, SC (``[before, after, text]``) and PQ (``[after, text]``) alternating.

    Bright and dark "after" images alternate in pairs; the scores follow the brightness (see
    :data:`JUDGE_BRIGHT_SC`), so a judge trained on them gives scores that depend on the picture.
    """
    rng = random.Random(seed)
    white = _white_canvas(image_dir)
    examples = []
    images: tuple[Path, ...]
    for i in range(n):
        step = rng.choice(synthetic_request(rng).steps)
        semantic, bright = i % 2 == 0, (i // 2) % 2 == 0
        after = _after_image(image_dir / f"judge_after_{seed}_{i}.png", bright, rng)
        sc_text, pq_text = _judge_texts(templates, step.prompt or "")
        if semantic:
            before = _before_image(step, white, image_dir / f"judge_before_{seed}_{i}.png", rng)
            scores = JUDGE_BRIGHT_SC if bright else JUDGE_DARK_SC
            user, images = "<image><image>" + sc_text, (before, after)
        else:
            scores = JUDGE_BRIGHT_PQ if bright else JUDGE_DARK_PQ
            user, images = "<image>" + pq_text, (after,)
        reply = judge_reply(scores, JUDGE_REASONING[("sc" if semantic else "pq", bright)])
        examples.append(
            SFTExample(messages=(ChatTurn("user", user), ChatTurn("assistant", reply)), images=images)
        )
    return examples
