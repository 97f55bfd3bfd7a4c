"""A small RISEBench dataset and run outputs, shared by the RISE scorer tests and the hostile eval tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

# index, category, extra fields, replies per role (consistency, reasoning, quality)
SAMPLES: list[tuple[str, str, dict[str, Any], dict[str, str]]] = [
    ("t1", "temporal_reasoning", {"reference": "R t1"},
     {"consistency": "Final Score: 5", "reasoning": "**Final Score:** **5**", "quality": "Final Score:\n\n**5**"}),
    ("t2", "temporal_reasoning", {"reference": "R t2"},
     {"consistency": "Final Score: 5", "reasoning": "Final Score: **X**", "quality": "Final Score: 5"}),
    ("c1", "causal_reasoning", {"reference": "R c1", "consistency_free": True},
     {"reasoning": "Final Score: 5/5", "quality": "final score: 5"}),
    ("c2", "causal_reasoning", {"reference": "R c2"}, {}),
    ("s1", "spatial_reasoning", {"reference": "R s1", "reasoning_img": "x.png"},
     {"consistency": "Final Score: 3", "reasoning": "Final Score: 1", "quality": "Final Score: 4"}),
    ("s2", "spatial_reasoning", {"reference": "R s2", "consistency_free": False},
     {"reasoning": "Final Score: 5", "quality": "Final Score: 5"}),
    ("l1", "logical_reasoning", {"reference_txt": "42"},
     {"consistency": "Final Score: 1", "reasoning": "Final Score: 0"}),
    ("l2", "logical_reasoning", {"reference_img": "l2_ref.png"},
     {"consistency": "Final Score: 1", "reasoning": "Final Score: 2"}),
]  # fmt: skip


def _dataset(tmp_path: Path) -> tuple[Path, Path]:
    data, outputs = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    records = []
    for number, (index, category, extra, _) in enumerate(SAMPLES):
        mode = ("RGBA", "P", "RGB")[number % 3]
        Image.new(mode, (900 + number, 400), 40 * number).save(data / f"{index}.png")
        records.append({"index": index, "category": category, "instruction": f"INSTR {index}",
                        "image": f"{index}.png", **extra})  # fmt: skip
        if index != "c2":  # c2 has no output: counted as missing, never judged
            folder = outputs / "images" / category
            folder.mkdir(parents=True, exist_ok=True)
            suffix = "jpg" if index == "t2" else "png"
            Image.new("RGB", (64, 48), (number * 30, 5, 9)).save(folder / f"{index}.{suffix}")
    Image.new("RGB", (50, 50), (1, 2, 3)).save(data / "l2_ref.png")
    (data / "data.json").write_text(json.dumps(records), encoding="utf-8")
    return data, outputs
