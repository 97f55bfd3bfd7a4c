"""Every teacher call of `data prompts` on disk: what makes the command resumable.

One JSON file per call, ``WORK/<domain id>/<sub-category id>/lexicon.json`` and ``prompts-NNN.json``,
written atomically as soon as the call ends: the request, its SHA-256, every raw reply (all
attempts), the parse errors, the tokens the replies carried and, for a call that gave nothing usable, a
one-line failure reason.
A rerun reuses a stored call whose request is byte-identical and that did not fail, and reads its
last reply again (so a file edited by hand is checked like a fresh reply); anything else (missing,
unreadable, failed, a request that changed with the seed or the taxonomy) is asked again.

A reply is stored cut at :data:`MAX_STORED_REPLY_CHARS` (the most the reply reader reads: a longer
reply is refused unread anyway), with :data:`CUT_MARKER` saying how much was left out, so a teacher
answering 30 MB cannot make a 30 MB file per attempt (nor one too large to be read back).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.agents.reply import MAX_REPLY_CHARS
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.untrusted import load_json

MAX_RECORD_BYTES = 8 * 1_048_576
MAX_STORED_REPLY_CHARS = MAX_REPLY_CHARS
"""Characters of a teacher reply kept on disk (1 MiB); the rest is replaced by :data:`CUT_MARKER`."""
CUT_MARKER = "\n[cut by interleave-thinker: {count} more characters not stored]"


@dataclass
class CallRecord:
    """One teacher call as stored."""

    kind: str
    request_sha256: str
    request: str
    replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: str | None = None
    input_tokens: int = 0
    """Tokens of every attempt of the call, as the teacher's server reported them (0 when it reports none)."""
    output_tokens: int = 0


def request_digest(request: str) -> str:
    return hashlib.sha256(request.encode("utf-8")).hexdigest()


def call_path(work_dir: Path, domain_id: str, sub_id: str, name: str) -> Path:
    """Where a call is kept; ``name`` is ``lexicon`` or ``prompts-NNN``."""
    return work_dir / domain_id / sub_id / f"{name}.json"


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def stored_reply(reply: str) -> str:
    """``reply`` as kept on disk: whole up to :data:`MAX_STORED_REPLY_CHARS`, else cut with a marker."""
    if len(reply) <= MAX_STORED_REPLY_CHARS:
        return reply
    return reply[:MAX_STORED_REPLY_CHARS] + CUT_MARKER.format(count=len(reply) - MAX_STORED_REPLY_CHARS)


def load_call(path: Path, request: str) -> CallRecord | None:
    """The stored call for ``request`` when it can be reused (present, readable, same request, not failed)."""
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return None
        data = load_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("request_sha256") != request_digest(request):
        return None
    replies, errors = _strings(data.get("replies")), _strings(data.get("errors"))
    if data.get("failed") is not None or not replies or errors is None:
        return None
    return CallRecord(str(data.get("kind")), request_digest(request), request, replies, errors)


def save_call(path: Path, record: CallRecord) -> None:
    write_atomic(path, json.dumps(asdict(record), ensure_ascii=False, indent=1) + "\n")
