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
from tests.helpers.common import parse_python

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


def printed_command_lines() -> Iterator[tuple[str, str]]:
    """(where, text after ``interleave-thinker ``) of every command line written in the product's strings:
    messages, advice and help (an f-string's values read as ``{}``)."""
    import ast

    for path in sorted((REPO / "src" / "interleave_thinker").rglob("*.py")):
        for node in ast.walk(parse_python(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            for match in re.finditer(r"interleave-thinker ([^`'\"\n;)]*)", text):
                yield f"{path.relative_to(REPO)}:{node.lineno}", re.split(r"\. |, | \(|: ", match.group(1))[0]


def flags_of_commands() -> dict[tuple[str, ...], set[str]]:
    """Every command's path (``("eval", "run")``) and the flags it takes, hidden ones too."""
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        found[path] = {
            o for p in command.params for o in (*getattr(p, "opts", []), *getattr(p, "secondary_opts", []))
        }
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_every_command_line_the_product_prints_names_flags_that_command_takes() -> None:
    """Advice such as "run `interleave-thinker eval score --fresh-scores`" must work as written on the command
    it names (the refusal that named ``--judge``, a flag of ``eval run`` only, on ``run`` was such a line).
    Prose ("interleave-thinker keeps its caches") is told apart by its first word: not a command."""
    commands = flags_of_commands()
    top = {path[0] for path in commands if path}
    checked, wrong = 0, []
    for where, line in printed_command_lines():
        words = line.split()
        if not words or words[0] not in top:
            continue
        path: tuple[str, ...] = ()
        while len(path) < len(words) and (*path, words[len(path)]) in commands:
            path = (*path, words[len(path)])
        flags = [w.split("=", 1)[0].rstrip(".,:]") for w in words[len(path) :] if w.startswith("--")]
        missing = [flag for flag in flags if flag not in commands[path]]
        checked += 1
        if missing:
            wrong.append(
                f"{where}: `interleave-thinker {line}`: {' '.join(path)} has no {', '.join(missing)}"
            )
    assert checked >= 30  # the walk reached the product's advice
    assert wrong == [], "\n".join(wrong)
