"""The drift suite: picture sequences made here, with a known break at a known step, to measure a
consistency scorer against the truth (AUROC of broken against unbroken, and where it puts the break).

Every sequence is drawn with Pillow from a seed: a scene (a sky gradient, ground, a sun and trees)
with a subject (a figure of a given shape, colour and markings) that walks across it, step after step,
with the small changes a faithful sequence has (position, size, light, noise). A broken sequence is the
same sequence with one thing swapped from its break step on:

- ``identity``: the subject becomes another figure (another body shape and markings, same colour);
- ``colour``: the subject's colour turns to a distant hue (same figure);
- ``style``: the whole picture is rendered another way (a flat poster of few colours and heavy
  outlines instead of smooth shading);
- ``scene``: the subject walks on in another place (another sky, ground and scenery).

Each broken sequence has an unbroken twin (same seed, no swap). Sizes and seeds are fixed
(:data:`SUITE`), so every scorer sees the same pictures and the figures are comparable.
"""

from __future__ import annotations

import colorsys
import dataclasses
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFilter, ImageOps

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR, MANIFEST, REQUESTS, write_trace
from interleave_thinker.core.types import PlanStep, Request, StepRecord, Trace
from interleave_thinker.core.untrusted import MAX_JSON_BYTES, load_json, read_bounded
from interleave_thinker.eval.calibration import stats

KINDS = ("identity", "colour", "style", "scene")
SHAPES = ("circle", "square", "triangle", "diamond", "star")


@dataclass(frozen=True)
class SuiteSpec:
    """The fixed suite: per kind ``per_kind`` broken sequences and as many unbroken twins."""

    per_kind: int = 24
    """Broken sequences of each kind (each with an unbroken twin): 4 kinds x 24 x 2 = 192 sequences."""
    steps: int = 6
    """Pictures in a sequence; a broken one changes its kind from a seeded step (2 to ``steps``) on."""
    size: int = 128
    """Each picture's side in pixels."""
    seed: int = 2026
    """The base of every sequence's random stream (``seed:kind:index``), so the suite is the same everywhere."""
    subject: float = 0.27
    """The subject's radius as a share of the picture's side (0.27: it fills about a fifth of the frame)."""
    walk: float = 0.2
    """How far the subject walks over the sequence, as a share of the side."""


SUITE = SuiteSpec()
"""The suite every figure is measured on."""
DEV_SUITE = SuiteSpec(seed=7)
"""Other seeds, the same sizes: where a scorer's settings were chosen (never the figures' suite)."""
TRUTH_FILE = "drift.json"


@dataclass(frozen=True)
class Sequence:
    kind: str
    seed: int
    broken: bool
    break_step: int | None
    """1-based step whose image is the first after the swap (None: unbroken)."""
    images: list[Image.Image]


@dataclass(frozen=True)
class _Subject:
    shape: str
    """One of :data:`SHAPES`; an identity break swaps in a subject of another shape and markings."""
    hue: float
    """The body's hue (0-1); a colour break turns it a third to two thirds of the way round."""
    marks: int
    """Stripes across the body (0-3)."""


@dataclass(frozen=True)
class _Scene:
    sky: tuple[tuple[int, int, int], tuple[int, int, int]]
    """The sky's colours at its top and at the horizon (a vertical blend)."""
    ground: tuple[int, int, int]
    horizon: float
    """The horizon's height as a share of the side, from the top."""
    trees: tuple[tuple[float, float], ...]
    """Each tree's place across and its height, as shares of the side."""
    sun: tuple[float, float]
    """The sun's centre, as shares of the side."""


def _rgb(hue: float, saturation: float, value: float) -> tuple[int, int, int]:
    r, g, b = colorsys.hsv_to_rgb(hue % 1.0, saturation, value)
    return int(r * 255), int(g * 255), int(b * 255)


def _scene(rng: random.Random) -> _Scene:
    hue = rng.random()
    return _Scene(
        sky=(_rgb(hue, 0.35, 0.95), _rgb(hue + 0.05, 0.6, 0.7)),
        ground=_rgb(hue + rng.uniform(0.25, 0.75), 0.55, rng.uniform(0.35, 0.6)),
        horizon=rng.uniform(0.55, 0.7),
        trees=tuple((rng.uniform(0.05, 0.95), rng.uniform(0.12, 0.22)) for _ in range(rng.randint(2, 4))),
        sun=(rng.uniform(0.1, 0.9), rng.uniform(0.08, 0.25)),
    )


def _subject(rng: random.Random, avoid: _Subject | None = None) -> _Subject:
    shapes = [s for s in SHAPES if avoid is None or s != avoid.shape]
    marks = [m for m in (0, 1, 2, 3) if avoid is None or m != avoid.marks]
    return _Subject(rng.choice(shapes), rng.random() if avoid is None else avoid.hue, rng.choice(marks))


def _polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if shape == "square":
        return [(cx - r, cy - r), (cx + r, cy - r), (cx + r, cy + r), (cx - r, cy + r)]
    if shape == "triangle":
        return [(cx, cy - r * 1.1), (cx + r * 1.1, cy + r), (cx - r * 1.1, cy + r)]
    if shape == "diamond":
        return [(cx, cy - r * 1.2), (cx + r, cy), (cx, cy + r * 1.2), (cx - r, cy)]
    points = []
    for i in range(10):
        radius = r * (1.15 if i % 2 == 0 else 0.5)
        angle = math.pi / 2 + i * math.pi / 5
        points.append((cx + radius * math.cos(angle), cy - radius * math.sin(angle)))
    return points


def _draw_scene(draw: ImageDraw.ImageDraw, scene: _Scene, size: int, light: float) -> None:
    top, bottom = scene.sky
    horizon = int(scene.horizon * size)
    for y in range(horizon):
        t = y / max(1, horizon - 1)
        colour = tuple(int((a + (b - a) * t) * light) for a, b in zip(top, bottom, strict=True))
        draw.line([(0, y), (size, y)], fill=colour)
    draw.rectangle([0, horizon, size, size], fill=tuple(int(c * light) for c in scene.ground))
    sx, sy = scene.sun[0] * size, scene.sun[1] * size
    draw.ellipse([sx - 7, sy - 7, sx + 7, sy + 7], fill=(int(250 * light), int(220 * light), 90))
    for x, height in scene.trees:
        tx, h = x * size, height * size
        draw.rectangle([tx - 2, horizon - h * 0.4, tx + 2, horizon + 2], fill=(90, 60, 30))
        draw.polygon(
            [(tx, horizon - h * 1.3), (tx + h * 0.4, horizon - h * 0.35), (tx - h * 0.4, horizon - h * 0.35)],
            fill=(40, int(120 * light), 50),
        )


def _draw_subject(draw: ImageDraw.ImageDraw, subject: _Subject, cx: float, cy: float, r: float) -> None:
    body = _rgb(subject.hue, 0.85, 0.9)
    dark = _rgb(subject.hue, 0.9, 0.45)
    if subject.shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=body, outline=dark, width=2)
    else:
        draw.polygon(_polygon(subject.shape, cx, cy, r), fill=body, outline=dark)
    for i in range(subject.marks):  # markings: stripes across the body
        y = cy - r * 0.5 + i * r * 0.45
        draw.line([(cx - r * 0.6, y), (cx + r * 0.6, y)], fill=dark, width=3)
    draw.ellipse([cx - r * 0.35, cy - r * 0.55, cx - r * 0.1, cy - r * 0.3], fill=(255, 255, 255))
    draw.ellipse([cx + r * 0.1, cy - r * 0.55, cx + r * 0.35, cy - r * 0.3], fill=(255, 255, 255))


def _poster(image: Image.Image) -> Image.Image:
    """Another rendering style: few flat colours and heavy dark outlines."""
    flat = ImageOps.posterize(image.filter(ImageFilter.ModeFilter(5)), 2)
    edges = image.convert("L").filter(ImageFilter.FIND_EDGES).point(lambda v: 255 if v > 40 else 0)
    outline = edges.filter(ImageFilter.MaxFilter(3))
    flat.paste((20, 20, 20), mask=outline)
    return flat


def _frame(
    scene: _Scene, subject: _Subject, step: int, rng: random.Random, spec: SuiteSpec, styled: bool
) -> Image.Image:
    size = spec.size
    image = Image.new("RGB", (size, size))
    draw = ImageDraw.Draw(image)
    light = 1.0 + rng.uniform(-0.05, 0.05)
    _draw_scene(draw, scene, size, light)
    cx = size * (0.5 - spec.walk / 2 + spec.walk * step / max(1, spec.steps - 1)) + rng.uniform(-3, 3)
    cy = size * scene.horizon - size * spec.subject * 0.4 + rng.uniform(-2, 2)
    _draw_subject(draw, subject, cx, cy, size * spec.subject * (1 + rng.uniform(-0.05, 0.05)))
    noise = Image.frombytes("L", (size, size), rng.randbytes(size * size)).convert("RGB")  # seeded grain
    image = Image.blend(image, noise, 0.04)
    return _poster(image) if styled else image


def make_sequence(kind: str, seed: int, broken: bool, spec: SuiteSpec = SUITE) -> Sequence:
    """One sequence of ``spec.steps`` pictures; broken ones swap ``kind`` from a seeded break step."""
    if kind not in KINDS:
        raise ValueError(f"drift kind {kind!r}: use one of {', '.join(KINDS)}")
    rng = random.Random(f"{spec.seed}:{kind}:{seed}")
    scene, subject = _scene(rng), _subject(rng)
    break_step = rng.randint(2, spec.steps) if broken else None
    other_scene = _scene(rng)
    other_subject = _subject(rng, avoid=subject)
    far_hue = _Subject(subject.shape, subject.hue + rng.uniform(0.33, 0.67), subject.marks)
    frames = []
    for step in range(1, spec.steps + 1):
        swapped = break_step is not None and step >= break_step
        frame_rng = random.Random(f"{spec.seed}:{kind}:{seed}:{step}")
        s_scene = other_scene if swapped and kind == "scene" else scene
        s_subject = subject
        if swapped and kind == "identity":
            s_subject = other_subject
        elif swapped and kind == "colour":
            s_subject = far_hue
        styled = swapped and kind == "style"
        frames.append(_frame(s_scene, s_subject, step - 1, frame_rng, spec, styled))
    return Sequence(kind, seed, broken, break_step, frames)


def suite(spec: SuiteSpec = SUITE) -> list[Sequence]:
    """Every kind's broken sequences and their unbroken twins, in a fixed order."""
    return [
        make_sequence(kind, seed, broken, spec)
        for kind in KINDS
        for seed in range(spec.per_kind)
        for broken in (True, False)
    ]


PairScorer = Callable[[list[Image.Image]], list[float]]
"""A consistency scorer as the suite sees it: one score per consecutive pair, 0 (unrelated) to 10."""


def sequence_id(sequence: Sequence) -> str:
    return f"{sequence.kind}-{sequence.seed:03d}-{'broken' if sequence.broken else 'twin'}"


def truth(sequence: Sequence) -> dict[str, Any]:
    return {"kind": sequence.kind, "broken": sequence.broken, "break_step": sequence.break_step}


def measure_pairs(truths: dict[str, dict[str, Any]], pair_scores: dict[str, list[float]]) -> dict[str, Any]:
    """Per kind: AUROC of (10 - the lowest pair score) for broken against unbroken sequences, and the
    share of broken sequences whose lowest-scoring pair ends at the break step (ties: the earlier pair).
    A sequence without scores is counted as unscored, never guessed."""
    results: dict[str, Any] = {}
    for kind in KINDS:
        broken: list[float] = []
        intact: list[float] = []
        located = unscored = 0
        for item_id, known in truths.items():
            if known["kind"] != kind:
                continue
            pairs = pair_scores.get(item_id)
            if not pairs:
                unscored += 1
                continue
            lowest = min(range(len(pairs)), key=lambda i: (pairs[i], i))
            (broken if known["broken"] else intact).append(10.0 - pairs[lowest])
            located += bool(known["broken"] and lowest + 2 == known["break_step"])
        if not broken or not intact:
            if unscored:
                results[kind] = {"auroc": None, "localisation": None, "unscored": unscored}
            continue
        results[kind] = {
            "auroc": round(stats.auroc(broken, intact), 4),
            "localisation": round(located / len(broken), 4),
            "broken": len(broken),
            "unbroken": len(intact),
            "unscored": unscored,
        }
    return results


def measure(scorer: PairScorer, sequences: list[Sequence]) -> dict[str, Any]:
    """:func:`measure_pairs` with ``scorer`` run on the pictures in memory."""
    return measure_pairs(
        {sequence_id(s): truth(s) for s in sequences}, {sequence_id(s): scorer(s.images) for s in sequences}
    )


def write_suite(root: Path, spec: SuiteSpec = SUITE) -> list[str]:
    """The suite as a folder of runs (``requests/<id>/trace.json`` and PNGs, ``batch.json``) that
    ``eval score consistency`` scores with any scorer, and ``drift.json`` with the truth."""
    sequences = suite(spec)
    for sequence in sequences:
        item_id = sequence_id(sequence)
        folder = root / REQUESTS / item_id
        steps = []
        for position, image in enumerate(sequence.images, start=1):
            name = f"step{position}.png"
            (folder / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
            image.save(folder / IMAGES_DIR / name)
            plan = PlanStep(step_number=position, prompt=f"the figure walks on, picture {position}")
            steps.append(
                StepRecord(
                    step=plan, kind="image", planned_prompt=plan.prompt, accepted_image=name, complete=True
                )
            )
        request = Request(
            text="A figure walks through one place, picture after picture.", id=item_id, task=sequence.kind
        )
        trace = Trace(request=request, steps=steps)
        trace.status = "succeeded"
        write_trace(folder, trace)
    ids = [sequence_id(s) for s in sequences]
    write_atomic(root / MANIFEST, json.dumps({"ids": ids, "input": "drift suite"}) + "\n")
    record = {"suite": dataclasses.asdict(spec), "sequences": {sequence_id(s): truth(s) for s in sequences}}
    write_atomic(root / TRUTH_FILE, json.dumps(record, indent=1) + "\n")
    return ids


def measure_scored(suite_dir: Path, scores_dir: Path) -> dict[str, Any]:
    """The suite's truth (``drift.json``) against any scorer's ``scores.jsonl`` of it."""
    record = load_json(read_bounded(suite_dir / TRUTH_FILE, MAX_JSON_BYTES, what=TRUTH_FILE))
    scores = scores_dir / "scores.jsonl"
    if not scores.is_file():
        raise InputError(
            f"{scores}: no such file; score the suite first (eval score consistency --outputs {suite_dir})."
        )
    pair_scores: dict[str, list[float]] = {}
    for line in read_bounded(scores, MAX_JSON_BYTES, what="scores.jsonl").decode("utf-8").splitlines():
        row = load_json(line)
        pairs = row.get("pairs") if isinstance(row, dict) else None
        if row.get("status") == "ok" and isinstance(pairs, list):
            values = [p.get("score") for p in pairs]
            if all(isinstance(v, int | float) for v in values):
                pair_scores[str(row.get("id"))] = [float(v) for v in values]
    return {"suite": record["suite"], "kinds": measure_pairs(record["sequences"], pair_scores)}
