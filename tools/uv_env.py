"""Print ``export UV_...=...`` lines that hand uv the package indexes pip is configured with.

Why: ``make demo`` installs with uv (it unpacks the ~5 GB pinned torch in parallel, several times faster
than pip), but uv reads no pip configuration, and a machine may keep the pinned torch wheels behind pip's
``extra-index-url`` or ``find-links`` (a local ``file://`` index). uv must see what pip sees, and, like pip,
take the best match over all indexes. Standard library only: it runs before anything is installed.
Usage: ``eval "$(python tools/uv_env.py)"``.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

UV_VARIABLES = {
    "index-url": ("UV_DEFAULT_INDEX", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
}
"""pip setting -> (uv variable, the separator uv expects between several values)."""
PRECEDENCE = {"global": 1, "install": 2, ":env:": 3}
"""pip's own order: a ``PIP_*`` variable beats the ``[install]`` section, which beats ``[global]``."""


def pip_settings(listing: str) -> dict[str, str]:
    """The settings of ``pip config list`` that uv needs, each from its highest-precedence source."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        rank = PRECEDENCE.get(section, 0)
        if key in UV_VARIABLES and rank and rank >= found.get(key, (0, ""))[0]:
            found[key] = (rank, value.strip().strip("'\""))
    return {key: value for key, (_, value) in found.items()}


def main() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    for key, value in pip_settings(listing).items():
        variable, separator = UV_VARIABLES[key]
        print(f"export {variable}={shlex.quote(separator.join(value.split()))}")
    print("export UV_INDEX_STRATEGY=unsafe-best-match")


if __name__ == "__main__":
    main()
