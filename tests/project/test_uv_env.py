"""`make demo` hands uv the indexes pip is configured with (tools/uv_env.py): same wheels for both."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "tools" / "uv_env.py"
_spec = importlib.util.spec_from_file_location("uv_env", SCRIPT)
assert _spec is not None and _spec.loader is not None
uv_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_env)
pip_settings = uv_env.pip_settings

LISTING = """\
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/global/wheels'
install.find-links='/install/wheels'
:env:.default-timeout='180'
site.index-url='https://mirror.example/simple'
"""


def test_each_setting_comes_from_its_highest_precedence_source() -> None:
    assert pip_settings(LISTING) == {
        "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
        "find-links": "/install/wheels",  # [install] beats [global]
    }  # site.* is not a section pip reads for these keys here; timeouts are not uv's business
    assert pip_settings(LISTING + ":env:.find-links='/env/wheels'\n")["find-links"] == "/env/wheels"


def test_the_script_prints_uv_variables_for_pips_environment() -> None:
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,  # no configuration file: only the variables below
        "PIP_FIND_LINKS": "/a /b",
        "PIP_EXTRA_INDEX_URL": "file:///x/simple",
    }
    env.pop("PIP_CONSTRAINT", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = set(done.stdout.splitlines())
    assert {
        "export UV_FIND_LINKS=/a,/b",  # uv separates find-links with commas
        "export UV_EXTRA_INDEX_URL=file:///x/simple",
        "export UV_INDEX_STRATEGY=unsafe-best-match",
    } <= lines
    assert not any(line.startswith("export UV_CONSTRAINT") for line in lines)
