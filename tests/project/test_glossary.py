"""One name per concept: every flag of every command is a term of docs/glossary.md or a settings key.

The command tree is walked as the CLI builds it (cli/main.py), so a new flag with a name of its own
fails here until the glossary says what it means; the old spellings kept as hidden aliases are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.config_keys import documented_keys

REPO = Path(__file__).resolve().parents[2]
TEACHER = "openai:http://127.0.0.1:9/v1#teacher"
"""A served teacher never called: the command stops where it would start writing."""


def normal(name: str) -> str:
    """``--max-parse-attempts``, ``max parse attempts`` and ``agents.max_parse_attempts``'s leaf alike."""
    return re.sub(r"[\s_-]+", "-", name.strip().strip("`").lstrip("-").lower())


def glossary_terms() -> set[str]:
    """The first cell of every glossary table row; ``a / b`` and ``a (b)`` name the terms a and b."""
    terms: set[str] = set()
    for line in (REPO / "docs" / "glossary.md").read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if len(cells) < 4 or set(cells[1].strip()) <= {"-", ":"} or cells[1].strip() == "name":
            continue
        for part in re.split(r"\s*/\s*|\s*\(|\)", cells[1]):
            if part.strip():
                terms.add(normal(part))
    return terms


def long_flags(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, bool]]:
    """(command, long flag, hidden) of every option; a boolean's ``--no-X`` is its flag's negation."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from long_flags(sub, (*path, name))
        return
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option":
            continue
        for flag in param.opts:
            if flag.startswith("--"):
                yield " ".join(path), flag, bool(param.hidden)


def test_every_flag_is_a_glossary_term_or_a_settings_key() -> None:
    known = glossary_terms() | {normal(key.rpartition(".")[2]) for key in documented_keys()}
    flags = list(long_flags(typer.main.get_command(app)))
    assert len({flag for _, flag, _ in flags}) > 60  # the walk reached every command
    missing = sorted(
        {f"{flag} ({cmd})" for cmd, flag, hidden in flags if not hidden and normal(flag) not in known}
    )
    assert missing == [], f"flags that are neither a docs/glossary.md term nor a settings key: {missing}"


def test_renamed_flags_keep_their_old_spelling_hidden() -> None:
    """The old spellings of renamed flags: hidden, and each still reaches the new flag's concept."""
    hidden = {(cmd, flag) for cmd, flag, is_hidden in long_flags(typer.main.get_command(app)) if is_hidden}
    assert {
        ("data prompts", "--max-attempts"),
        ("data prompts", "--concurrency"),
        ("reward", "--batch-size"),
        ("data export", "--from"),
    } <= hidden


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [("--max-attempts", "--max-parse-attempts", "5"), ("--concurrency", "--subcategory-concurrency", "2")],
)
def test_an_old_spelling_works_and_says_once_which_flag_replaces_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, old: str, new: str, value: str
) -> None:
    """``data prompts --max-attempts 5`` is ``--max-parse-attempts 5``, with one note on stderr."""
    import interleave_thinker.datagen.prompts_run as prompts_run

    seen: dict[str, Any] = {}

    def stop(tree: Any, teacher: Any, out: Any, work: Any, settings: Any, **_: Any) -> Any:
        seen["settings"] = settings
        raise typer.Exit(3)

    monkeypatch.setattr(prompts_run, "write_prompts", stop)
    result = CliRunner().invoke(
        app, ["data", "prompts", "--out", str(tmp_path / "p.jsonl"), "--llm", TEACHER, old, value]
    )
    assert result.exit_code == 3, result.output
    assert result.output.count(f"note: {old} is deprecated; use {new}.") == 1
    settings = seen["settings"]
    got = settings.retry.max_attempts if new == "--max-parse-attempts" else settings.subcategory_concurrency
    assert got == int(value)
