"""The topic taxonomy `data prompts` writes prompts for: domains, each with its sub-categories.

A taxonomy is a YAML file (the shipped one is ``datagen/taxonomy.yaml``: 8 domains, 75 sub-categories,
in our own words). Every domain and sub-category has an ``id`` (a slug: it names folders and prompt
ids, so it must stay stable), a ``name`` and a ``description`` the teacher reads. Loading validates
everything and names the file and the field at fault, e.g.
``taxonomy.yaml: domains[2].subcategories is empty``.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.sanitize import clean_text

SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_SLUG = 48
MAX_NAME = 120
MAX_DESCRIPTION = 600
MAX_TAXONOMY_BYTES = 1_048_576
SHIPPED_TAXONOMY = "taxonomy.yaml"


def _text(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError("must be text")
    text = " ".join(clean_text(value).split())
    if not text:
        raise ValueError("is empty")
    if len(text) > limit:
        raise ValueError(f"is longer than {limit} characters")
    return text


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    description: str = ""

    @field_validator("id", mode="before")
    @classmethod
    def _slug(cls, value: Any) -> str:
        if not isinstance(value, str) or not SLUG.fullmatch(value) or len(value) > MAX_SLUG:
            raise ValueError(
                f"must be a slug of at most {MAX_SLUG} characters: lower-case letters, digits and '-' "
                "(e.g. 'paper-folding')"
            )
        return value

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> str:
        return _text(value, MAX_NAME)

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, value: Any) -> str:
        return _text(value, MAX_DESCRIPTION)


class Subcategory(_Entry):
    """One sub-category: the unit the teacher writes a lexicon, templates and prompts for."""


class Domain(_Entry):
    subcategories: list[Subcategory] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Domain:
        _check_unique([s.id for s in self.subcategories], "subcategories")
        return self


class Taxonomy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = 1
    domains: list[Domain] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Taxonomy:
        _check_unique([d.id for d in self.domains], "domains")
        return self

    def pairs(self) -> list[tuple[Domain, Subcategory]]:
        """Every (domain, sub-category) in file order: the order of the output."""
        return [(domain, sub) for domain in self.domains for sub in domain.subcategories]


def _check_unique(ids: list[str], where: str) -> None:
    seen: dict[str, int] = {}
    for index, item_id in enumerate(ids):
        if item_id in seen:
            raise ValueError(f"{where}[{index}].id '{item_id}' is already used by {where}[{seen[item_id]}]")
        seen[item_id] = index


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(error: Any) -> str:
    """One pydantic error as ``field problem``: ``domains[2].subcategories is empty``."""
    where = _location(tuple(error["loc"]))
    kind = error["type"]
    if kind == "missing":
        return f"{where} is missing"
    if kind == "extra_forbidden":
        return f"{where} is not a known field (known: id, name, description, subcategories, version)"
    if kind == "too_short":
        return f"{where} is empty"
    message = str(error["msg"]).removeprefix("Value error, ")
    if where == "(top level)":
        return message
    return (
        f"{where}.{message}" if message.startswith(("domains[", "subcategories[")) else f"{where} {message}"
    )


def parse_taxonomy(data: Any, source: str) -> Taxonomy:
    """A validated taxonomy from parsed YAML; :class:`InputError` naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: must hold a mapping with a 'domains' list, not {type(data).__name__}.")
    try:
        return Taxonomy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors()[:5])
        raise InputError(f"{source}: {problems}. See docs/data.md for the taxonomy format.") from None


def shipped_taxonomy_text() -> str:
    return (resources.files("interleave_thinker.datagen") / SHIPPED_TAXONOMY).read_text(encoding="utf-8")


def load_taxonomy(path: Path | None) -> tuple[Taxonomy, str]:
    """The taxonomy of ``path`` (None: the shipped one) and the SHA-256 of its text."""
    if path is None:
        text, source = shipped_taxonomy_text(), SHIPPED_TAXONOMY
    else:
        source = str(path)
        try:
            if path.stat().st_size > MAX_TAXONOMY_BYTES:
                raise InputError(f"{path}: larger than {MAX_TAXONOMY_BYTES} bytes; is it a taxonomy?")
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"Cannot read taxonomy file {path}: {exc.strerror}.") from None
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML ({str(exc).splitlines()[0]}).") from None
    return parse_taxonomy(data, source), hashlib.sha256(text.encode("utf-8")).hexdigest()
