"""The ``tiny`` backend kind: registered from the package root, light to import, checked before any build."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from interleave_thinker.backends import specs
from interleave_thinker.backends.specs import checkpoint_folder, load_image_backend, load_vlm_backend
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.tiny.models import ensure_tiny_models
from interleave_thinker.train.common import base_checkpoint

PROBE = """
import json, sys
from interleave_thinker.backends import specs
from interleave_thinker.tiny import tokenizer as tiny_tokenizer
from interleave_thinker.train.sft.templates import TRAINING_VARIANTS
heavy = sorted(m for m in ("torch", "transformers", "diffusers", "trl", "datasets") if m in sys.modules)
print(json.dumps({
    "vlm": "tiny" in specs.VLM_BACKENDS,
    "image": "tiny" in specs.IMAGE_BACKENDS,
    "checkpoint": "tiny" in specs.CHECKPOINT_KINDS,
    "training_variant": TRAINING_VARIANTS.get(tiny_tokenizer.CHAT_TEMPLATE) == tiny_tokenizer.TRAINING_TEMPLATE,
    "heavy": heavy,
}))
"""


def test_importing_the_specs_registers_tiny_and_loads_no_model_library() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {
        "vlm": True,
        "image": True,
        "checkpoint": True,
        "training_variant": True,
        "heavy": [],
    }


def test_register_kind_accepts_the_same_loader_again_and_refuses_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("VLM_BACKENDS", "IMAGE_BACKENDS", "CHECKPOINT_KINDS"):
        monkeypatch.setattr(specs, name, dict(getattr(specs, name)))

    def folder(target: str) -> object:
        return f"/models/{target}"

    specs.register_kind("probe", checkpoint=folder)  # type: ignore[arg-type]
    specs.register_kind("probe", checkpoint=folder)  # type: ignore[arg-type]
    assert specs.checkpoint_folder("probe:x") == "/models/x"
    with pytest.raises(ConfigError, match="'probe' is registered twice"):
        specs.register_kind("probe", checkpoint=lambda target: folder(target))  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="'tiny' is registered twice"):
        specs.register_kind("tiny", image=lambda spec, options: None)  # type: ignore[arg-type,return-value]
    assert specs.checkpoint_folder("probe:y") == "/models/y"


def test_unknown_tiny_targets_are_refused_before_anything_is_built() -> None:
    with pytest.raises(ConfigError, match="tiny VLM target 'generator'"):
        checkpoint_folder("tiny:generator")
    with pytest.raises(ConfigError, match="'tiny:nope': target must be planner, critic"):
        load_vlm_backend("tiny:nope")
    with pytest.raises(ConfigError, match="target must be 'generator' or empty"):
        load_image_backend("tiny:critic")
    with pytest.raises(ConfigError, match="use tiny:planner, tiny:critic"):
        base_checkpoint("tiny:judge")
    with pytest.raises(ConfigError, match="Unknown backend kind 'nope'"):
        checkpoint_folder("nope:planner")


@pytest.mark.slow
def test_training_starts_from_the_tiny_folders_the_registry_names() -> None:
    paths = ensure_tiny_models()
    assert base_checkpoint("tiny:critic") == str(paths.critic) == str(checkpoint_folder("tiny:critic"))
    assert base_checkpoint("tiny:") == str(paths.planner)


def test_another_template_set_is_adapted_from_the_shipped_built_in_model(tmp_path: Path) -> None:
    """Built-in templates keep their shipped keys and build from scratch; any other set starts from the
    shipped built-in model (seconds to copy) and is fine-tuned for ``ADAPT_STEPS``, under a key of its own."""
    from interleave_thinker.core.prompt_store import TemplateSet, builtin_templates
    from interleave_thinker.tiny.format_trained import ADAPT_STEPS, _start, format_folder, template_digest
    from interleave_thinker.tiny.shipped import ARTEFACTS

    builtin = builtin_templates()
    edited = TemplateSet(
        kind="custom",
        origin="test",
        texts={**builtin.texts, "critic": builtin.texts["critic"] + "\nBe brief."},
    )
    shipped = json.loads((ARTEFACTS / "manifest.json").read_text(encoding="utf-8"))["models"]
    for role in ("planner", "critic", "judge"):
        assert f"{format_folder(template_digest(role, builtin))}/{role}" in shipped
        assert _start(role, tmp_path, template_digest(role, builtin)) == (None, None)
    digest = template_digest("critic", edited)
    assert digest != template_digest("critic", builtin)
    steps, start = _start("critic", tmp_path, digest)
    assert steps == ADAPT_STEPS
    assert start == tmp_path / format_folder(template_digest("critic", builtin)) / "critic"
    key = f"{start.parent.name}/critic"
    copied = (start / "model.safetensors").read_bytes()
    assert hashlib.sha256(copied).hexdigest() == shipped[key]["files"]["model.safetensors"]
