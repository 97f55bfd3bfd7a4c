"""Output files appended to are never opened through a link (issue 41, item 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interleave_thinker.core.no_follow import OutputLinkError, open_append, open_append_bytes
from interleave_thinker.core.paths import confine


def test_a_plain_file_is_created_then_appended(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with open_append(path) as handle:
        handle.write("a\n")
    with open_append_bytes(path) as handle:
        handle.write(b"b\n")
    assert path.read_bytes() == b"a\nb\n"


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "dangling", "folder"])
def test_a_link_is_refused_and_its_target_untouched(tmp_path: Path, kind: str) -> None:
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious\n")
    confine(out)
    path = out / "scores.jsonl"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, path)
    elif kind == "dangling":
        path.symlink_to(outside / "new")
    else:
        (out / "cache").symlink_to(outside, target_is_directory=True)
        path = out / "cache" / "victim"
    with pytest.raises(OutputLinkError, match=str(path.parent if kind == "folder" else path)):
        open_append(path)
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
