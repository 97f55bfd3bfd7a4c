"""What ``import interleave_thinker`` costs: no ``train`` module and nothing of the testing wing, while ``tiny:``
specs still resolve (issue 31: the package root used to load 18 ``train`` modules through the tiny kind)."""

from __future__ import annotations

import json
import subprocess
import sys

LOADED = (
    "import interleave_thinker, sys, json; "
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('interleave_thinker'))))"
)

SPECS = """
import json, sys
import interleave_thinker
from interleave_thinker.backends import specs
from interleave_thinker.backends.chat_templates import TRAINING_VARIANTS
from interleave_thinker.tiny import tokenizer
planner = specs.parse_spec("tiny:planner", specs.VLM_BACKENDS)
generator = specs.parse_spec("tiny:generator", specs.IMAGE_BACKENDS)
critic = specs.parse_spec("tiny:critic-sft", specs.CHECKPOINT_KINDS)
print(json.dumps({
    "parsed": [[s.kind, s.target] for s in (planner, generator, critic)],
    "training_variant": TRAINING_VARIANTS.get(tokenizer.CHAT_TEMPLATE) == tokenizer.TRAINING_TEMPLATE,
    "train": sorted(m for m in sys.modules if m.startswith("interleave_thinker.train")),
    "heavy": sorted(m for m in ("torch", "transformers", "diffusers", "trl", "datasets", "ray") if m in sys.modules),
}))
"""


def run(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout)


def test_importing_the_package_loads_no_train_module_and_no_testing_wing() -> None:
    loaded = run(LOADED)
    assert isinstance(loaded, list)
    assert [m for m in loaded if m.startswith("interleave_thinker.train")] == []
    assert [m for m in loaded if m.startswith("interleave_thinker.testing")] == []
    assert {"interleave_thinker.runtime.pipeline", "interleave_thinker.backends.specs"} <= set(loaded)


def test_tiny_specs_resolve_after_a_bare_import_without_loading_train() -> None:
    found = run(SPECS)
    assert found == {
        "parsed": [["tiny", "planner"], ["tiny", "generator"], ["tiny", "critic-sft"]],
        "training_variant": True,
        "train": [],
        "heavy": [],
    }


CLI = """
import json, sys
import interleave_thinker.cli.main
print(json.dumps({
    "heavy": sorted(m for m in ("torch", "transformers", "diffusers", "trl", "datasets", "ray", "gradio")
                    if m in sys.modules),
    "train": sorted(m for m in sys.modules if m.startswith("interleave_thinker.train")),
}))
"""


def test_importing_the_cli_loads_no_model_library_and_no_train_module() -> None:
    """Before the first phase line a command imports only the CLI (issue 45 item 8: docs/notes/startup.md);
    the model libraries and the trainers load inside the commands that use them."""
    assert run(CLI) == {"heavy": [], "train": []}
