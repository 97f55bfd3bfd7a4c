"""Every flag of every command is documented: in a user guide's section that names the command (the
README or docs/*.md, not the developer notes), or in the command's own ``--help`` epilog; a flag of a
shared bundle (settings, pipeline, scheduling) anywhere in the guides, as it is documented once for all."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from interleave_thinker.cli.main import app
from interleave_thinker.cli.options import PIPELINE_FLAGS, SCHEDULING_FLAGS, SETTINGS_FLAGS

SHARED = {"--" + name.replace("_", "-") for name in (*SETTINGS_FLAGS, *PIPELINE_FLAGS, *SCHEDULING_FLAGS)}
"""The flag bundles every command of a kind takes, each documented once for all of them."""

REPO = Path(__file__).resolve().parents[2]


def sections() -> list[str]:
    """Each guide cut at its headings: a flag counts where its section names the command."""
    guides = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [s for guide in guides for s in re.split(r"\n(?=#{1,4} )", guide.read_text(encoding="utf-8"))]


def visible_flags(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, str]]:
    """(command, long flag, epilog) of every visible option, the group's own (``--version``) included."""
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and not param.hidden:
            for flag in param.opts:
                if flag.startswith("--"):
                    yield " ".join(path), flag, command.epilog or ""
    for name, sub in getattr(command, "commands", {}).items():
        yield from visible_flags(sub, (*path, name))


def test_every_flag_of_every_command_is_in_a_user_guide() -> None:
    texts = sections()
    flags = list(visible_flags(typer.main.get_command(app)))
    assert len({cmd for cmd, _, _ in flags}) >= 24  # the walk reached every command
    missing = []
    for command, flag, epilog in flags:
        named = re.compile(re.escape(flag) + r"(?![\w-])")
        if named.search(epilog) or any(named.search(p) and (command in p or flag in SHARED) for p in texts):
            continue
        missing.append(f"{command or 'interleave-thinker'} {flag}")
    assert missing == [], f"flags no user guide section naming their command documents: {missing}"
