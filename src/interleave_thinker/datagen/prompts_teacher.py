"""What `data prompts` asks its teacher and how it reads the answers.

Per sub-category the teacher first writes a lexicon and instruction templates
(``prompts/datagen/lexicon.txt``), then batches of prompts (``prompts/datagen/prompts.txt``), each batch
shown a seeded sample of the lexicon and templates so that batches differ. Replies are read like the
agents' replies (:func:`~interleave_thinker.agents.reply.read_reply`: bounded at 1 MiB, cleaned,
strict JSON first, then the literal reader, never evaluated), then checked item by item: an item
that is not text, is too long or too short, or holds an ``<image>`` marker is dropped; a reply left
with too little is a :class:`ParseError`, which the retry policy asks again.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from interleave_thinker.agents.messages import IMAGE_MARKER
from interleave_thinker.agents.reply import read_reply, show
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.datagen.taxonomy import Domain, Subcategory

TEMPLATES = ("lexicon", "prompts")
LEXICON_SIZE = 40
TEMPLATE_COUNT = 12
TERMS_PER_BATCH = 10
TEMPLATES_PER_BATCH = 4
MAX_TERMS = 200
MAX_TERM_CHARS = 80
MAX_TEMPLATES = 50
MAX_TEMPLATE_CHARS = 400
MAX_ITEMS = 500
MIN_PROMPT_CHARS = 12
MAX_PROMPT_CHARS = 1_200
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_LEADING_MARK = re.compile(r"^(?:\d{1,3}[.)]\s+|[-*\u2022]\s+)")
_QUOTES = "\"'\u201c\u201d\u2018\u2019"


@functools.cache
def template_text(name: str) -> str:
    """Our own teacher template ``name``: ``prompts/datagen/<name>.txt``, data beside the agents' templates
    but in a folder of its own, so the built-in template set stays the released set."""
    folder = resources.files("interleave_thinker.prompts") / "datagen"
    return (folder / f"{name}.txt").read_text(encoding="utf-8")


def template_digests() -> dict[str, str]:
    return {n: hashlib.sha256(template_text(n).encode("utf-8")).hexdigest() for n in TEMPLATES}


def fill_once(template: str, values: dict[str, str]) -> str:
    """Replace each ``{name}`` of ``values`` in one pass, so braces inside a value are never filled."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass(frozen=True)
class Lexicon:
    """A sub-category's terms and instruction templates, as the teacher wrote them (checked)."""

    terms: tuple[str, ...]
    templates: tuple[str, ...]


def lexicon_request(domain: Domain, sub: Subcategory) -> str:
    values = {
        "domain": domain.name,
        "domain_description": domain.description or domain.name,
        "subcategory": sub.name,
        "subcategory_description": sub.description or sub.name,
        "lexicon_size": str(LEXICON_SIZE),
        "template_count": str(TEMPLATE_COUNT),
    }
    return fill_once(template_text("lexicon"), values)


def batch_rng(seed: int, domain: Domain, sub: Subcategory, batch: int) -> random.Random:
    """The same sample for the same seed, sub-category and batch, on any machine and Python."""
    digest = hashlib.sha256(f"{seed}:{domain.id}:{sub.id}:{batch}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def prompts_request(
    domain: Domain, sub: Subcategory, lexicon: Lexicon, *, count: int, batch: int, seed: int
) -> str:
    rng = batch_rng(seed, domain, sub, batch)
    terms = rng.sample(lexicon.terms, min(TERMS_PER_BATCH, len(lexicon.terms)))
    templates = rng.sample(lexicon.templates, min(TEMPLATES_PER_BATCH, len(lexicon.templates)))
    values = {
        "domain": domain.name,
        "subcategory": sub.name,
        "subcategory_description": sub.description or sub.name,
        "batch": str(batch),
        "terms": ", ".join(terms),
        "templates": "\n".join(f"- {t}" for t in templates),
        "count": str(count),
    }
    return fill_once(template_text("prompts"), values)


def _items(answer: Any, key: str, raw: str) -> list[Any]:
    value = answer.get(key) if isinstance(answer, dict) else answer
    if not isinstance(value, list):
        raise ParseError(f"the answer has no '{key}' list (got {show(answer)})", raw=raw)
    return value[:MAX_ITEMS]


def clean_item(value: Any, limit: int) -> str | None:
    """One text item on one line, without list marks or wrapping quotes; None when unusable."""
    if not isinstance(value, str):
        return None
    text = " ".join(clean_text(value).split())
    text = _LEADING_MARK.sub("", text)
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    if not text or len(text) > limit:
        return None
    return text


def _unique(values: list[str | None], limit: int) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for value in values:
        if value is not None and value.casefold() not in seen and len(seen) < limit:
            seen[value.casefold()] = value
    return tuple(seen.values())


def parse_lexicon(reply: str) -> Lexicon:
    """``{"lexicon": [...], "templates": [...]}`` with at least one usable term and template."""
    read = read_reply(reply)
    terms = _unique(
        [clean_item(v, MAX_TERM_CHARS) for v in _items(read.answer, "lexicon", read.text)], MAX_TERMS
    )
    templates = _unique(
        [clean_item(v, MAX_TEMPLATE_CHARS) for v in _items(read.answer, "templates", read.text)],
        MAX_TEMPLATES,
    )
    if not terms or not templates:
        missing = "lexicon" if not terms else "templates"
        raise ParseError(f"the answer's '{missing}' list holds no usable text item", raw=read.text)
    return Lexicon(terms, templates)


def usable_prompt(value: Any) -> str | None:
    """A prompt a batch can run: text of reasonable length with no ``<image>`` marker (no image is given)."""
    text = clean_item(value, MAX_PROMPT_CHARS)
    if text is None or len(text) < MIN_PROMPT_CHARS or IMAGE_MARKER.search(text):
        return None
    return text


def parse_prompts(reply: str) -> list[str]:
    """``{"prompts": [...]}`` (or a bare list): the usable prompts in reply order, at least one."""
    read = read_reply(reply)
    prompts = [p for p in (usable_prompt(v) for v in _items(read.answer, "prompts", read.text)) if p]
    if not prompts:
        raise ParseError(
            f"the answer's 'prompts' list holds no usable prompt ({MIN_PROMPT_CHARS}-{MAX_PROMPT_CHARS} "
            "characters, no <image> marker)",
            raw=read.text,
        )
    return prompts
