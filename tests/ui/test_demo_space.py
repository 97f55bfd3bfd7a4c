"""The Hugging Face Space in examples/space installs: its requirements are the package's own pins, and
its app imports the package from the source folder the Space carries (issue 33 item 7)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

SPACE = REPO / "examples" / "space"


def requirement_lines() -> list[str]:
    text = (SPACE / "requirements.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_space_requirements_are_the_packages_own_pins() -> None:
    """It pinned ``interleave-thinker[demo]==0.1.0``, which no package index has: the Space could not
    build. Every line is now a dependency pyproject.toml pins (installed from the index here)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert requirement_lines() == project["dependencies"] + project["optional-dependencies"]["demo"]
    assert not any(
        line.lower().startswith(("interleave-thinker", "interleave_thinker")) for line in requirement_lines()
    )


def test_space_app_imports_the_package_it_carries(tmp_path: Path) -> None:
    """The Space's folder as its README builds it: ``import interleave_thinker`` finds the copy beside
    app.py (the Space runs ``python app.py`` in that folder; ``-c`` puts the folder first the same way)."""
    space = tmp_path / "space"
    space.mkdir()
    for name in ("app.py", "README.md", "requirements.txt"):
        shutil.copy(SPACE / name, space / name)
    shutil.copytree(REPO / "src" / "interleave_thinker", space / "interleave_thinker")
    readme = (SPACE / "README.md").read_text(encoding="utf-8")
    assert "cp -r src/interleave_thinker SPACE_REPO/interleave_thinker" in readme
    probe = "import sys, importlib.util as u; sys.stdout.write(u.find_spec('interleave_thinker').origin)"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=space,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": ""},
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout).resolve() == (space / "interleave_thinker" / "__init__.py").resolve()
