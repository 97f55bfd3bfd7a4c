"""A batch's shared set-ups: the scripted model servers, its command line, and a poisoned batch run in process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker import Pipeline
from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest, Message
from interleave_thinker.cli.batch import in_order
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.reports import write_reports
from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.common import REPO, free_port
from tests.helpers.pipelines import scripted_config, scripted_pipeline

POISON = "POISON"
PLAN = (
    "<answer>{'execution_plan': [{'step_number': 1, 'step_name': 'S1', 'instruction': 'draw', "
    "'prompt': 'PROMPT one', 'auxiliary_text': None}, {'step_number': 2, 'step_name': 'S2', "
    "'instruction': 'colour', 'prompt': 'PROMPT two', 'auxiliary_text': 'done'}]}</answer>"
)


VERDICT = "<answer>{'previous_step_success': True, 'refine_prompt': ''}</answer>"


class Switch:
    """Poisons the request whose text holds POISON until ``fixed`` is set (the next run finds it healed)."""

    def __init__(self, poison: dict[str, Any]) -> None:
        self.poison, self.fixed = poison, False

    def planner(self, messages: list[Message]) -> str:
        text = ScriptedVLMBackend.text_in(messages)
        tag = "poisoned" if POISON in text else "plain"
        if POISON in text and not self.fixed and "plan" in self.poison:
            return str(self.poison["plan"])
        return PLAN.replace("PROMPT", tag)


class PoisonImage(ImageBatchMixin):
    name = "poison-image"

    def __init__(self, switch: Switch) -> None:
        self.switch, self.inner = switch, ScriptedImageBackend()

    def generate(self, request: ImageRequest) -> Image.Image:
        if (
            request.prompt.startswith("poisoned")
            and not self.switch.fixed
            and "generate" in self.switch.poison
        ):
            raise self.switch.poison["generate"]
        return self.inner.generate(request)


def pipeline(switch: Switch) -> Pipeline:
    config = scripted_config(32, 2, agents={"max_new_tokens": 8})
    return scripted_pipeline(config, switch.planner, VERDICT, PoisonImage(switch))


def items_file(tmp_path: Path, poisoned_id: str = "p") -> Path:
    rows = [{"id": f"ok{i}", "prompt": f"Show process {i}"} for i in range(5)]
    rows.insert(2, {"id": poisoned_id, "prompt": f"Show the {POISON} process"})
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_batch(out: Path, items: list[BatchItem], switch: Switch, retry_failed: bool = True) -> dict[str, Any]:
    store = RunStore(out)
    store.open({"input": "in", "ids": [i.id for i in items], "settings": {}}, resume=True)
    runner = BatchRunner(pipeline(switch), store, BatchSettings(concurrency=3, retry_failed=retry_failed))
    runner.run(items)
    return write_reports(out, in_order(store.traces(), store.manifest()["ids"]))


@contextmanager
def scripted_servers() -> Iterator[dict[str, str]]:
    """The scripted chat and edit model servers (``testing.doubles.scripted_models``) on free ports."""
    procs, urls = [], {}
    try:
        for kind in ("chat", "edit"):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "interleave_thinker.testing.doubles.scripted_models", kind, str(port)],
                cwd=REPO,
                stdout=subprocess.PIPE,
            )
            procs.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            urls[kind] = f"http://127.0.0.1:{port}"
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


def batch_command(servers: dict[str, str], inputs: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "interleave_thinker",
        "batch",
        "--input",
        str(inputs),
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--planner",
        f"openai:{servers['chat']}/v1#scripted",
        "--critic",
        f"openai:{servers['chat']}/v1#scripted",
        "--generator",
        f"http:{servers['edit']}",
        "--concurrency",
        "4",
        "--quiet",
    ]
