"""Planner GRPO as FastVideo's InterleaveThinker branch has it: the ``planner_rl`` data kind (``text_input``,
``images``, ``plan_score``), guidance prompts with their images, and ``plan_score`` in the reward.

The rows are written here (the shared fixtures hold no ``planner_rl`` file) next to a copy of the shared
fixture images.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.agents.planner import narrative_planner_messages, planner_messages
from interleave_thinker.cli.data import app
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.train.data.examples import PlannerRLExample
from interleave_thinker.train.data.issues import DatasetError
from interleave_thinker.train.data.loaders import load_kind, load_planner_rl
from interleave_thinker.train.grpo.config import GRPORunConfig
from interleave_thinker.train.grpo.data import planner_dataset, planner_examples_from_files
from interleave_thinker.train.grpo.trainer import reward_functions
from interleave_thinker.train.rewards.planner import planner_score_reward
from tests.conftest import shared_path

GOOD_PLAN = (
    "<think>Two steps.</think><answer>{'execution_plan': [{'step_number': 1, 'step_name': 's', "
    "'instruction': 'Draw a cat.', 'prompt': 'A cat', 'auxiliary_text': None}]}</answer>"
)
ROWS: list[dict[str, Any]] = [
    {"text_input": "Draw a cat in three steps both visually and textually", "plan_score": 0.75},
    {"text_input": "<image>Continue this drawing for two more steps.", "images": ["images/cat_sketch.png"]},
    {"instruction": "Compare <image> and <image>", "images": ["images/cat_sketch.png", "images/cat_color.png"],
     "planner_score": 1},
]  # fmt: skip


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The shared fixture images beside a ``planner_rl.jsonl`` holding :data:`ROWS`."""
    target = tmp_path / "train-data"
    shutil.copytree(shared_path("fixtures", "train-data", "images"), target / "images")
    for path in (target / "images").iterdir():
        path.chmod(0o644)
    write(target / "planner_rl.jsonl", ROWS)
    return target


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_loader_accepts_narrative_and_guidance_rows(folder: Path) -> None:
    examples = load_planner_rl(folder / "planner_rl.jsonl")
    images = (folder / "images").resolve()
    assert examples == [
        PlannerRLExample("Draw a cat in three steps both visually and textually", (), 0.75),
        PlannerRLExample(
            "<image>Continue this drawing for two more steps.", (images / "cat_sketch.png",), None
        ),
        PlannerRLExample(
            "Compare <image> and <image>", (images / "cat_sketch.png", images / "cat_color.png"), 1.0
        ),
    ]
    assert load_kind(folder / "planner_rl.jsonl", "planner_rl") == examples


SKETCH, COLOR = "images/cat_sketch.png", "images/cat_color.png"
BRANCH_ROWS: list[tuple[dict[str, Any], str, tuple[str, ...], float | None]] = [
    # the branch's own test row (tests/local_tests/test_interleave_thinker_data.py on fix/interleave-thinker-review)
    ({"text_input": "<image>draw a cat in three clear steps", "images": [SKETCH], "plan_score": 0.75},
     "<image>draw a cat in three clear steps", (SKETCH,), 0.75),
    # text: instruction, text_input, origin_prompt, prompt; the first non-empty one
    ({"text_input": "t", "instruction": "i", "prompt": "p", "origin_prompt": "o"}, "i", (), None),
    ({"text_input": "t", "prompt": "p", "origin_prompt": "o"}, "t", (), None),
    ({"prompt": "p", "origin_prompt": "o"}, "o", (), None),
    ({"instruction": "", "text_input": "t"}, "t", (), None),
    # a row's messages: the first user turn stands in for an absent instruction only
    ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "text_input": "t"},
     "u", (), None),
    ({"messages": [{"role": "user", "content": "u"}], "instruction": "i"}, "i", (), None),
    # images: input_image_paths, images, image_paths, then one path: input_image_path, image_path, origin_image_path
    ({"text_input": "<image>", "input_image_paths": [COLOR], "images": [SKETCH], "image_paths": [SKETCH]},
     "<image>", (COLOR,), None),
    ({"text_input": "<image>", "images": [COLOR], "image_paths": [SKETCH]}, "<image>", (COLOR,), None),
    ({"text_input": "<image>", "image_paths": [COLOR], "image_path": SKETCH}, "<image>", (COLOR,), None),
    ({"text_input": "<image>", "image_path": COLOR, "origin_image_path": SKETCH}, "<image>", (COLOR,), None),
    ({"text_input": "<image>", "origin_image_path": COLOR}, "<image>", (COLOR,), None),
    # score: planner_score, plan_score, reward, score, then the same inside ground_truth / evaluation
    ({"text_input": "x", "plan_score": 0.25, "planner_score": 0.5}, "x", (), 0.5),
    ({"text_input": "x", "score": 0.25, "reward": 1}, "x", (), 1.0),
    ({"text_input": "x", "ground_truth": {"plan_score": 0.5}}, "x", (), 0.5),
    ({"text_input": "x", "evaluation": '{"score": 0.5}', "reward": 0.25}, "x", (), 0.25),
]  # fmt: skip


@pytest.mark.parametrize(("row", "text", "images", "score"), BRANCH_ROWS)
def test_planner_rl_reads_the_branch_fields_in_its_priority(
    folder: Path, row: dict[str, Any], text: str, images: tuple[str, ...], score: float | None
) -> None:
    """Each row read as FastVideo's branch reads it (``normalize_planner_rl_record``, ``_planner_instruction``,
    ``_planner_image_paths``, ``_planner_score_from_item``)."""
    write(folder / "row.jsonl", [row])
    (example,) = load_planner_rl(folder / "row.jsonl")
    assert example == PlannerRLExample(text, tuple((folder / i).resolve() for i in images), score)


def test_loader_rejects_bad_rows_with_file_line_and_field(folder: Path) -> None:
    bad = [
        {"plan_score": 0.5},
        {"text_input": "draw", "plan_score": 7},
        {"text_input": "draw", "plan_score": "high"},
        {"text_input": "<image> and <image>", "images": ["images/cat_sketch.png"]},
        {"text_input": "<image>", "images": ["images/missing.png"]},
        {"text_input": "   "},
        ["not", "an", "object"],
    ]
    path = folder / "bad.jsonl"
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in bad) + "\n" + '{"text_input": "x",}\n', encoding="utf-8"
    )
    with pytest.raises(DatasetError) as err:
        load_planner_rl(path)
    assert [str(issue) for issue in err.value.issues] == [
        f"{path}:9: (json): invalid JSON: Expecting property name enclosed in double quotes (column 20)",
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in bad), encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        load_planner_rl(path)
    assert [str(issue) for issue in err.value.issues] == [
        f"{path}:1: instruction: missing (also accepted: text_input, origin_prompt, prompt)",
        f"{path}:2: plan_score: must be a number from 0 to 1, got 7",
        f"{path}:3: plan_score: must be a number from 0 to 1, got 'high'",
        f"{path}:4: images: 1 image(s) but 2 <image> marker(s) in text_input; put one <image> where each "
        "image belongs",
        f"{path}:5: images[0]: image file not found: {(folder / 'images').resolve()}/missing.png",
        f"{path}:6: text_input: must not be empty",
        f"{path}:7: (record): must be a JSON object, got list",
    ]


def test_data_validate_summarises_planner_rl(folder: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(folder / "planner_rl.jsonl"), "--kind", "planner_rl"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "3 planner_rl record(s)",
        "guidance (with images): 2; plan_score in 2 record(s), mean 0.88",
    ]


def test_grpo_rows_are_the_pipelines_planner_turns_with_their_images(folder: Path) -> None:
    templates = builtin_templates()
    examples = planner_examples_from_files([folder / "planner_rl.jsonl"], None, templates)
    assert [e.text_input for e in examples] == [r.get("text_input", r.get("instruction")) for r in ROWS]

    # Narrative: the narrative template, text only, no images.
    narrative_rows = planner_dataset(examples[:1], templates)
    narrative = narrative_planner_messages(templates, examples[0].text_input)[0]["content"]
    assert narrative_rows[0]["prompt"] == [
        {"role": "user", "content": [{"type": "text", "text": narrative[0]["text"]}]}
    ]
    assert narrative_rows[0]["images"] == [] and narrative_rows["plan_score"] == [0.75]

    # Guidance: the parts in the order the pipeline sends them, each image placeholder filled by the
    # row's image, in order.
    ds = planner_dataset(examples[1:], templates)
    assert ds["request"] == [e.text_input for e in examples[1:]]
    assert ds["plan_score"] == [None, 1.0]
    for row, example in zip(ds, examples[1:], strict=True):
        pictures = [Image.open(p).convert("RGB") for p in example.images]
        expected = planner_messages(templates, example.text_input, pictures)[0]["content"]
        parts = row["prompt"][0]["content"]
        assert [p["type"] for p in parts] == [p["type"] for p in expected]
        assert [p["text"] for p in parts if p["type"] == "text"] == [
            p["text"] for p in expected if p["type"] == "text"
        ]
        assert [(im.size, im.convert("RGB").tobytes()) for im in row["images"]] == [
            (im.size, im.tobytes()) for im in pictures
        ]
    assert [p["type"] for p in ds[1]["prompt"][0]["content"]] == ["text", "image", "text", "image", "text"]


def test_grpo_refuses_text_only_and_image_rows_together(folder: Path) -> None:
    templates = builtin_templates()
    examples = load_planner_rl(folder / "planner_rl.jsonl")
    with pytest.raises(ConfigError) as err:
        planner_dataset(examples, templates)
    assert str(err.value) == (
        "Planner GRPO prompts mix 1 text-only and 2 image-bearing request(s), which TRL cannot batch "
        "together; train each kind in its own run (split data.train)."
    )


def test_planner_sft_user_turns_are_not_templated_twice(tmp_path: Path) -> None:
    data = shared_path("fixtures", "train-data")
    templates = builtin_templates()
    filled = narrative_planner_messages(templates, "Draw a cat")[0]["content"][0]["text"]
    reply = json.loads((data / "planner_sft.json").read_text())[0]["messages"][1]["content"]
    path = tmp_path / "planner_sft.jsonl"
    write(
        path, [{"messages": [{"role": "user", "content": filled}, {"role": "assistant", "content": reply}]}]
    )
    [example] = planner_examples_from_files([path], None, templates)
    assert example == PlannerRLExample("Draw a cat")
    assert planner_dataset([example], templates)[0]["prompt"][0]["content"][0]["text"] == filled


def test_score_reward_uses_plan_score_for_well_formed_plans() -> None:
    completions = [
        GOOD_PLAN,
        "<answer>not a plan</answer>",
        [{"role": "assistant", "content": GOOD_PLAN}],
        GOOD_PLAN,
    ]
    assert planner_score_reward(None, completions, plan_score=[0.75, 0.75, 0.25, None]) == [
        0.75,
        0.0,
        0.25,
        None,
    ]
    assert planner_score_reward(None, [GOOD_PLAN]) == [None]  # a dataset without the column
    with pytest.raises(ValueError, match="column 'plan_score' has 1 values for 2 completions"):
        planner_score_reward(None, [GOOD_PLAN, GOOD_PLAN], plan_score=[0.5])


def test_planner_grpo_rewards_include_the_plan_score(tmp_path: Path) -> None:
    config = GRPORunConfig.model_validate(
        {
            "role": "planner",
            "output_dir": str(tmp_path),
            "model": {"name_or_path": "x"},
            "data": {"synthetic": 2},
        }
    )
    functions, weights, closers = reward_functions(config, "planner")
    assert [f.__name__ for f in functions] == ["planner_format", "planner_plan", "planner_score"]
    assert weights == [1.0, 1.0, 1.0] and closers == []
    assert functions[2](None, [GOOD_PLAN, "x"], plan_score=[0.5, 0.5]) == [0.5, 0.0]
