"""Near-duplicate prompts: exact, deterministic, dependency-free.

Method: a prompt is normalised (Unicode NFKC, lower case, split into runs of letters and digits) and
turned into its set of word 3-shingles (three consecutive tokens; a prompt of fewer than three tokens
is one shingle of all of them). Two prompts are near-duplicates when the Jaccard similarity of their
shingle sets is at least :data:`THRESHOLD` (0.8). Prompts are taken in a fixed order and a prompt is
dropped when it is a near-duplicate of one kept before it, so the result depends only on the order.

Why not all pairs: 40,000 prompts make 800 million pairs. The index uses prefix filtering (Chaudhuri et
al., 2006): with the shingles of every set sorted in one global order (by their SHA-1), two sets with
Jaccard >= t must share one of the first ``|A| - ceil(t * |A|) + 1`` shingles of each, so only prompts
sharing a prefix shingle are compared, and each comparison is exact. No false negatives, no sampling.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from dataclasses import dataclass, field

THRESHOLD = 0.8
SHINGLE = 3
_TOKEN = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    """Lower-case runs of letters and digits of the NFKC form of ``text``."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def shingles(text: str, size: int = SHINGLE) -> frozenset[str]:
    """The word ``size``-shingles of ``text`` (one shingle of every token when it has fewer)."""
    words = tokens(text)
    if len(words) < size:
        return frozenset([" ".join(words)]) if words else frozenset()
    return frozenset(" ".join(words[i : i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _rank(shingle: str) -> bytes:
    return hashlib.sha1(shingle.encode("utf-8")).digest()


@dataclass
class NearDuplicateIndex:
    """Kept prompts; :meth:`add` keeps a new one or names the kept prompt it duplicates."""

    threshold: float = THRESHOLD
    _sets: dict[str, frozenset[str]] = field(default_factory=dict)
    _order: dict[str, int] = field(default_factory=dict)
    _postings: dict[str, list[str]] = field(default_factory=dict)

    def _prefix(self, items: frozenset[str]) -> list[str]:
        ordered = sorted(items, key=_rank)
        return ordered[: len(ordered) - math.ceil(self.threshold * len(ordered)) + 1]

    def match(self, text: str) -> str | None:
        """The key of a kept prompt ``text`` is a near-duplicate of (the first kept, by key order), or None."""
        items = shingles(text)
        candidates: set[str] = set()
        for shingle in self._prefix(items):
            candidates.update(self._postings.get(shingle, ()))
        for key in sorted(candidates, key=self._order.__getitem__):
            if jaccard(items, self._sets[key]) >= self.threshold:
                return key
        return None

    def add(self, key: str, text: str) -> str | None:
        """Keep ``text`` under ``key`` and return None, or return the key of the kept prompt it duplicates."""
        duplicate = self.match(text)
        if duplicate is not None:
            return duplicate
        items = shingles(text)
        self._sets[key] = items
        self._order[key] = len(self._order)
        for shingle in self._prefix(items):
            self._postings.setdefault(shingle, []).append(key)
        return None
