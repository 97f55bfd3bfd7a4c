"""Reproducibility across machines: the tiny cache and the format training give byte-identical weights
when built in fresh folders, whatever CPU kernels and thread count the calling process would use; and
the shipped tiny models (``tiny/artefacts``) are exactly what a fresh build makes: every role's training
inputs are checked, and one role (the judge) is trained in full."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.tiny import format_trained as tiny_format
from interleave_thinker.tiny import models as tiny
from interleave_thinker.tiny import shipped
from interleave_thinker.tiny.format_trained import (
    INPUTS_FILE,
    SHIPPED_ROLES,
    ensure_format_trained,
    format_folder,
    format_recipe,
    template_digest,
)
from interleave_thinker.tiny.models import (
    COMPLETE_MARKER,
    ensure_tiny_model,
    tiny_recipe,
)
from interleave_thinker.tiny.rebuild import build_shipped, shipped_inputs
from interleave_thinker.tiny.shipped import REBUILD_ENV, file_digest, load_manifest, recipe_digest


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*.safetensors"))
    }


def expected_recipes() -> dict[str, dict[str, Any]]:
    """The recipe of every shipped model as the code stands (built-in templates)."""
    templates = builtin_templates()
    recipes: dict[str, dict[str, Any]] = {"generator": tiny_recipe("generator")}
    for role in SHIPPED_ROLES:
        digest = template_digest(role, templates)
        recipes[f"{format_folder(digest)}/{role}"] = format_recipe(role, digest)
    return recipes


def test_shipped_models_match_their_manifest_and_the_current_recipes() -> None:
    """If this fails after a change to a tiny model's recipe, regenerate them:
    python -m interleave_thinker.tiny.rebuild (docs/testing.md)."""
    models = load_manifest()["models"]
    assert json.loads(json.dumps(expected_recipes())) == {key: e["recipe"] for key, e in models.items()}
    for key, entry in models.items():
        assert entry["recipe_digest"] == recipe_digest(entry["recipe"])
        assert key == "generator" or set(entry["inputs"]) == {"base", "data"}, key  # what it trained from
        assert any(name.endswith("model.safetensors") for name in entry["files"]), key
        found = {name: file_digest(shipped.ARTEFACTS / key / name) for name in entry["files"]}
        assert found == entry["files"], key
    on_disk = {str(p.relative_to(shipped.ARTEFACTS)) for p in shipped.ARTEFACTS.rglob("*") if p.is_file()}
    listed = {f"{key}/{name}" for key, entry in models.items() for name in entry["files"]}
    assert on_disk == listed | {"manifest.json"}  # nothing shipped that the manifest does not vouch for


def refuse(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a shipped model must be copied, not built")


def test_first_use_copies_the_shipped_models_instead_of_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REBUILD_ENV, raising=False)
    monkeypatch.setattr(tiny, "run_pinned", refuse)
    monkeypatch.setattr(tiny_format, "_build_one", refuse)
    generator = ensure_tiny_model("generator", tmp_path)
    critic = ensure_format_trained("critic", tmp_path, templates=builtin_templates())
    judge = ensure_format_trained("judge", tmp_path, templates=builtin_templates())
    for key, folder in (
        ("generator", generator),
        (f"{critic.parent.name}/critic", critic),
        (f"{judge.parent.name}/judge", judge),
    ):
        entry = load_manifest()["models"][key]
        assert {name: file_digest(folder / name) for name in entry["files"]} == entry["files"]
        assert (folder / COMPLETE_MARKER).is_file()
    assert not (tmp_path / "planner").exists()  # the base planner is needed only to train


def test_a_changed_recipe_a_tampered_file_or_the_rebuild_switch_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REBUILD_ENV, raising=False)
    recipe = tiny_recipe("generator")
    assert shipped.shipped_folder("generator", recipe) is not None
    assert shipped.shipped_folder("generator", {**recipe, "seed": 99}) is None
    assert shipped.shipped_folder("planner", tiny_recipe("planner")) is None  # not shipped
    with monkeypatch.context() as patch:
        patch.setenv(REBUILD_ENV, "1")
        assert shipped.shipped_folder("generator", recipe) is None
    copy = tmp_path / "artefacts"
    shutil.copytree(shipped.ARTEFACTS, copy)
    monkeypatch.setattr(shipped, "ARTEFACTS", copy)
    monkeypatch.setattr(shipped, "MANIFEST", copy / "manifest.json")
    (copy / "generator" / "model_index.json").write_text("{}", encoding="utf-8")
    assert shipped.shipped_folder("generator", recipe) is None
    assert not shipped.install_shipped("generator", recipe, tmp_path / "into")


def this_cpu() -> str:
    """The processor's model name and the vector extensions the pinned numerics care about, so a failure on
    another machine says which machine it was."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return "unknown CPU"
    model = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?"
    )
    flags = next(
        (set(ln.split(":", 1)[1].split()) for ln in info.splitlines() if ln.startswith("flags")), set()
    )
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")
    return f"{model} ({', '.join(f for f in wanted if f in flags) or 'no AVX2'})"


def ask_for_other_numerics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller whose own environment asks for other kernels and another thread count than the builds pin:
    what a build makes must not depend on the machine or the calling process."""
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")


@pytest.mark.slow
def test_every_shipped_model_trains_from_the_inputs_its_manifest_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-role half of "the shipped models are what a fresh build makes": each format-trained model's
    base weights and training data, made afresh (no training, seconds) by a caller asking for other
    numerics, are the ones its shipped bytes were trained from. The training itself is one code path for
    every role, shown to make the shipped bytes by the full rebuild below."""
    ask_for_other_numerics(monkeypatch)
    models = load_manifest()["models"]
    found = shipped_inputs(tmp_path)
    assert set(found) == set(models) - {"generator"}
    for key, inputs in found.items():
        assert inputs == models[key]["inputs"], f"{key}, made on {this_cpu()}"


@pytest.mark.slow
def test_a_fresh_build_makes_the_shipped_judge_and_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full recipe of the judge (its format training, the shortest of the three: minutes) and the
    generator, built from scratch with the pinned numerics by a caller asking for other ones: the shipped
    bytes, which were built on another machine. With the test above this proves every shipped model: the
    planner's and critic's inputs are checked there, and their training runs the same code as the judge's.
    ``python -m interleave_thinker.tiny.rebuild`` rebuilds all of them."""
    ask_for_other_numerics(monkeypatch)
    models = load_manifest()["models"]
    built = build_shipped(tmp_path, roles=("judge",))
    assert set(built) == {"generator", *(key for key in models if key.endswith("/judge"))}
    for key, (recipe, folder) in built.items():
        assert recipe_digest(recipe) == models[key]["recipe_digest"], key
        made = {str(name): file_digest(folder / name) for name in shipped.model_files(folder)}
        assert made == models[key]["files"], f"{key}, built on {this_cpu()}"
        if key != "generator":  # the build trained from the inputs the manifest records
            assert json.loads((folder / INPUTS_FILE).read_text(encoding="utf-8")) == models[key]["inputs"]
