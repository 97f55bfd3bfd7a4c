"""Child process of the consistency memory test (issue 41, item 4): scores one sequence whose trace claims
``STEPS`` steps that all show one ``SIZE``-byte image, against the judge double, and prints the growth of
its own peak resident memory (VmHWM) while scoring, in bytes. Run: ``python -m tests.helpers.consistency_memory OUT``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

STEPS = 101  # 100 pairs: the default judge budget per item (eval.judge_calls_per_item)
SIZE = 1024 * 1024


def peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class _Counted(list[Any]):
    """A list that counts what is appended and keeps nothing."""

    appended = 0

    def append(self, item: Any) -> None:
        self.appended += 1

    def __len__(self) -> int:
        return self.appended


def main(root: Path) -> None:
    from PIL import Image
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app
    from interleave_thinker.core.run_folder import write_trace
    from interleave_thinker.core.types import PlanStep, Request, StepRecord, Trace
    from interleave_thinker.testing.doubles.judge import judge_server

    folder = root / "requests" / "long"
    (folder / "images").mkdir(parents=True)
    side = int((SIZE / 3) ** 0.5)
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(folder / "images" / "one.png")
    steps = []
    for position in range(1, STEPS + 1):
        plan = PlanStep(step_number=position, prompt=f"scene {position}")
        steps.append(
            StepRecord(
                step=plan, kind="image", planned_prompt=plan.prompt, accepted_image="one.png", complete=True
            )
        )
    trace = Trace(request=Request(text="A long story.", id="long"), steps=steps)
    trace.status = "succeeded"
    write_trace(folder, trace)
    (root / "batch.json").write_text(json.dumps({"ids": ["long"], "input": "x.jsonl", "settings": {}}))
    reply = json.dumps({"identity": 9, "style": 8, "scene": 10, "reason": "same"})
    with judge_server(lambda body: reply) as judge:
        judge.bodies = _Counted()  # the double keeps every body it was sent: counted here, not held
        before = peak()
        result = CliRunner().invoke(
            app,
            ["eval", "score", "consistency", "--outputs", str(root), "--judge", f"openai:{judge.url}#j",
             "--judge-attempts", "1", "--quiet"],
        )  # fmt: skip
        grown = peak() - before
    assert result.exit_code == 0, result.output
    print(json.dumps({"grown": grown, "calls": judge.calls}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
