"""Build planner SFT, critic SFT and critic RL examples from trajectories (our runs or release records).

Order, all seeded: 1. planner pairs (every valid plan; guidance pairs cut at random points of the
accepted image sequence), 2. classify each step with the rules, 3. critic examples from the
labelled attempts of SFT and RL steps, 4. balance True/False labels, 5. trim to the SFT:RL ratio.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from interleave_thinker.agents.critic import critic_text
from interleave_thinker.agents.messages import CANVAS_SIZE, fill
from interleave_thinker.agents.planner import narrative_planner_messages
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.types import PlanStep
from interleave_thinker.train.data.examples import ChatTurn, CriticRLExample, GroundTruth, SFTExample
from interleave_thinker.train.data.rules import BuildRules, BuildStats, apply_ratio, balance, classify
from interleave_thinker.train.data.trajectories import AttemptView, Trajectory

_FIELDS = ("step_number", "step_name", "instruction", "prompt", "auxiliary_text")


@dataclass
class BuildResult:
    planner_sft: list[SFTExample] = field(default_factory=list)
    critic_sft: list[SFTExample] = field(default_factory=list)
    critic_rl: list[CriticRLExample] = field(default_factory=list)
    stats: BuildStats = field(default_factory=BuildStats)


def write_canvas(path: Path) -> Path:
    """The release's white 1024x1024 "before" image of text-to-image attempts, as a file."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", CANVAS_SIZE, (255, 255, 255)).save(path)
    return path


def plan_answer(steps: list[PlanStep], reasoning: str | None) -> str:
    """A planner reply laid out like the release's SFT data (Python-literal dict inside ``<answer>``)."""
    lines = ",\n".join(
        "      {" + ", ".join(f"{k!r}: {getattr(s, k)!r}" for k in _FIELDS) + "}" for s in steps
    )
    body = "{\n   'execution_plan':\n   [\n" + lines + "\n   ]\n}"
    return f"<think>\n{reasoning or 'Plan the image steps.'}\n</think>\n\n<answer>\n{body}\n</answer>"


def verdict_answer(success: bool, refine_prompt: str, reasoning: str | None) -> str:
    answer = {"previous_step_success": success, "refine_prompt": refine_prompt}
    return f"<think>\n{reasoning or ('The step succeeded.' if success else 'The step fell short.')}\n</think>\n<answer>\n{answer!r}\n</answer>"


def planner_user_turn(templates: TemplateSet, text: str, n_images: int) -> str:
    if n_images == 0:
        return str(narrative_planner_messages(templates, text)[0]["content"][0]["text"])
    return fill(templates.get("planner_guidance"), text_input=text)


def planner_pairs(
    trajectories: list[Trajectory], templates: TemplateSet, rules: BuildRules, rng: random.Random
) -> list[SFTExample]:
    """Every valid plan as a pair, plus ``rules.guidance_cuts`` guidance pairs per accepted sequence."""
    pairs: list[SFTExample] = []
    for t in trajectories:
        if t.plan is None:
            continue
        user = planner_user_turn(templates, t.request, len(t.input_images))
        pairs.append(
            SFTExample(
                (ChatTurn("user", user), ChatTurn("assistant", plan_answer(t.plan, t.reasoning))),
                tuple(t.input_images),
            )
        )
        accepted = [s.accepted for s in t.steps if s.accepted is not None]
        if len(accepted) < 2 or len(accepted) != len(t.plan):
            continue
        cuts = rng.sample(range(1, len(accepted)), min(rules.guidance_cuts, len(accepted) - 1))
        for k in sorted(cuts):
            images = [*t.input_images, *accepted[:k]]
            rest = [s.model_copy(update={"step_number": i}) for i, s in enumerate(t.plan[k:], start=1)]
            text = (
                "<image>" * len(images) + f"{t.request} The images show the first {k} step(s); plan the rest."
            )
            reasoning = f"{len(rest)} step(s) remain after the {k} shown."
            pairs.append(
                SFTExample(
                    (
                        ChatTurn("user", planner_user_turn(templates, text, len(images))),
                        ChatTurn("assistant", plan_answer(rest, reasoning)),
                    ),
                    tuple(images),
                )
            )
    return pairs


def _critic_text(templates: TemplateSet, a: AttemptView, rules: BuildRules) -> str:
    """The critic's message as it read it: one ``<image>`` per image (before, after, then the references
    the run showed it) and the text :func:`~interleave_thinker.agents.critic.critic_text` makes."""
    rewritten = "" if a.attempt == 0 and rules.first_attempt_rewritten == "empty" else a.used_prompt
    text = critic_text(templates, a.planned_prompt, rewritten, len(a.references))
    return "<image>" * (2 + len(a.references)) + text


def critic_sft_example(
    templates: TemplateSet, a: AttemptView, rules: BuildRules, canvas: Path
) -> SFTExample | None:
    """A labelled attempt as a conversation; a failure needs a refined prompt to teach."""
    if a.label is None:
        return None
    refine = a.used_prompt if a.label else (a.refine_prompt or "").strip()
    if not refine:
        return None
    reply = verdict_answer(a.label, refine, a.reasoning)
    turns = (ChatTurn("user", _critic_text(templates, a, rules)), ChatTurn("assistant", reply))
    return SFTExample(turns, (a.before or canvas, a.after, *a.references))


def critic_rl_example(
    templates: TemplateSet, a: AttemptView, rules: BuildRules, canvas: Path
) -> CriticRLExample | None:
    if a.label is None or a.sc is None or a.pq is None:
        return None
    before = a.before or canvas
    return CriticRLExample(
        problem=_critic_text(templates, a, rules),
        images=(before, a.after, *a.references),
        origin_prompt=a.planned_prompt,
        origin_image_path=before,
        edited_image_path=a.after,
        previous_prompt=a.used_prompt,
        ground_truth=GroundTruth(a.label, a.sc, a.pq),
    )


def _counts(items: list[SFTExample] | list[CriticRLExample], label: Callable[..., bool]) -> dict[str, int]:
    yes = sum(1 for x in items if label(x))
    return {"true": yes, "false": len(items) - yes}


def _with_references(items: list[SFTExample] | list[CriticRLExample]) -> int:
    """How many of ``items`` show the critic more than its before and after images."""
    return sum(1 for x in items if len(x.images) > 2)


def sft_label(example: SFTExample) -> bool:
    return "'previous_step_success': True" in example.messages[-1].content


def rl_label(example: CriticRLExample) -> bool:
    return example.ground_truth.success


def build(
    trajectories: list[Trajectory],
    templates: TemplateSet,
    canvas: Path,
    *,
    rules: BuildRules | None = None,
    seed: int = 0,
) -> BuildResult:
    rules = rules or BuildRules()
    rng = random.Random(seed)
    result = BuildResult()
    stats = result.stats
    stats.trajectories = len(trajectories)
    for t in trajectories:
        stats.policies[t.references_policy] = stats.policies.get(t.references_policy, 0) + 1
    # 1. Planner pairs.
    result.planner_sft = planner_pairs(trajectories, templates, rules, rng)
    # 2-3. Classify steps, then turn their labelled attempts into critic examples.
    sft: list[SFTExample] = []
    rl: list[CriticRLExample] = []
    for t in trajectories:
        for step in t.steps:
            if not step.attempts:
                continue
            stats.steps += 1
            stats.attempts += len(step.attempts)
            decision = classify([a.overall for a in step.attempts], [a.label for a in step.attempts], rules)
            if not decision.scored:
                stats.unscored_steps += 1
            for name in decision.matched:
                stats.rules[name] += 1
            stats.pools[decision.pool or "unused"] += 1
            for a in step.attempts:
                if decision.pool == "sft" and (ex := critic_sft_example(templates, a, rules, canvas)):
                    sft.append(ex)
                elif decision.pool == "rl" and (rex := critic_rl_example(templates, a, rules, canvas)):
                    rl.append(rex)
    stats.labels["critic_sft_filtered"] = _counts(sft, sft_label)
    stats.labels["critic_rl_filtered"] = _counts(rl, rl_label)
    # 4. Balance labels; 5. keep the SFT:RL ratio.
    sft = balance(sft, sft_label, rules.balance_labels, rng)
    rl = balance(rl, rl_label, rules.balance_labels, rng)
    result.critic_sft, result.critic_rl = apply_ratio(sft, rl, rules.sft_rl_ratio, (sft_label, rl_label), rng)
    stats.labels["critic_sft"] = _counts(result.critic_sft, sft_label)
    stats.labels["critic_rl"] = _counts(result.critic_rl, rl_label)
    stats.with_references = {
        "critic_sft": _with_references(result.critic_sft),
        "critic_rl": _with_references(result.critic_rl),
    }
    stats.examples = {
        "planner_sft": len(result.planner_sft),
        "critic_sft": len(result.critic_sft),
        "critic_rl": len(result.critic_rl),
    }
    return result
