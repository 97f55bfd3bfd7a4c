"""The prompt-template store: the released templates obtained at run time, our own as a fallback.

The released checkpoints only behave when they see the exact prompts they were trained with, and
those texts are the authors', so we never ship them. They are resolved, like model weights, in this
order (:mod:`interleave_thinker.core.pinned_texts`): a folder the user names; our cache; a download of
the authors' source files at a pinned commit (string literals read with ``ast``, never executed), each
verified by SHA-256. Only when none of that is available do we use our own templates, the data files
of :mod:`interleave_thinker.prompts` (same placeholders and answer format, our words).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal, Unpack

from interleave_thinker.core.errors import TemplateError
from interleave_thinker.core.pinned_texts import (
    PinnedStore,
    StoreOptions,
    check_download,
    extract_literals,
    fetch_text,
    read_text,
    sha256_text,
    write_cache,
)
from interleave_thinker.core.types import TemplateInfo

logger = logging.getLogger(__name__)

PINNED_COMMIT = "94c7593ad600748444e4b2d5efd888a72a93a6bd"
DEFAULT_BASE_URL = "https://raw.githubusercontent.com/zhengdian1/InterleaveThinker"
FOLDER_ENV = "INTERLEAVE_THINKER_PROMPTS"
BASE_URL_ENV = "INTERLEAVE_THINKER_PROMPTS_URL"


@dataclass(frozen=True)
class ReleasedTemplate:
    """Where one released template lives in the authors' repository, and its digest."""

    source: str
    literal: str
    sha256: str


RELEASED: dict[str, ReleasedTemplate] = {
    "planner_narrative": ReleasedTemplate(
        "UEval/system.py",
        "NARRATIVE_PROMPT_JSON",
        "1ec6bae1daa3a7057e9169e9926336de106aa8e43f4672adf1efc8013e91ffef",
    ),
    "planner_guidance": ReleasedTemplate(
        "UEval/system.py",
        "GUIDANCE_GLOBAL_PROMPT_JSON",
        "ce02eeb8351a47c653d0210abeca3f5ec1ad974553365e88ceb144ab8202c0d3",
    ),
    "critic": ReleasedTemplate(
        "UEval/system.py",
        "Iterative_T2I_PROMPT_QWEN",
        "529a070bf11f5835aaed8f91ca28dac7759d9f2c887d53575e3692fa989634ce",
    ),
    "judge_context": ReleasedTemplate(
        "train/EasyR1/viescore/vie_prompts.py",
        "_context_no_delimit",
        "446482c9035af15092f48235470d6daf29c9930e3f9faa2cd0f722363c74adde",
    ),
    "judge_edit_rule": ReleasedTemplate(
        "train/EasyR1/viescore/vie_prompts.py",
        "_prompts_0shot_two_image_edit_rule_ours",
        "feb4da515471e2db8ba72b61c2cd799d6434c8a12e617331d91ccfc7aaae9165",
    ),
    "judge_edit_sc": ReleasedTemplate(
        "train/EasyR1/viescore/vie_prompts.py",
        "_prompts_0shot_tie_rule_SC_ours",
        "e881b53f5c8d82bed207393d0177f26d9cc682df958296ac40a1e4d1b537488e",
    ),
    "judge_pq": ReleasedTemplate(
        "train/EasyR1/viescore/vie_prompts.py",
        "_prompts_0shot_rule_PQ_ours",
        "b6e756ad2cc88708b6cd158216a4b6d7b15c16c6a156f8d55aea2659522d16fe",
    ),
}
TEMPLATE_NAMES = tuple(RELEASED)


@dataclass
class TemplateSet:
    """A resolved set of templates and where it came from (recorded in every trace)."""

    kind: Literal["released", "builtin", "custom"]
    origin: str
    texts: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str:
        try:
            return self.texts[name]
        except KeyError:
            raise TemplateError(
                f"Template '{name}' is not in the {self.kind} template set from {self.origin}. "
                "Run `interleave-thinker prompts download` to fetch the released templates."
            ) from None

    def info(self) -> TemplateInfo:
        return TemplateInfo(
            kind=self.kind,
            origin=self.origin,
            digests={name: sha256_text(text) for name, text in sorted(self.texts.items())},
        )


class TemplateStore(PinnedStore):
    """Resolves the template set once per process: folder, cache, download, then our own.

    ``verify=False`` accepts edited templates in a folder (the set is then ``custom``);
    ``builtin_fallback=False`` makes unavailable released templates an error instead.
    """

    FOLDER_ENV = FOLDER_ENV
    BASE_URL_ENV = BASE_URL_ENV
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    CACHE_NAME = "prompts"
    DEFAULT_TIMEOUT = 20.0

    def __init__(
        self, *, verify: bool = True, builtin_fallback: bool = True, **where: Unpack[StoreOptions]
    ) -> None:
        super().__init__(**where)
        self.verify = verify
        self.builtin_fallback = builtin_fallback
        self._resolved: TemplateSet | None = None
        self.fallback_reason: str | None = None
        """Why the built-in templates stand in for the released ones (None: they do not)."""

    @property
    def commit_cache(self) -> Path:
        return self.cache_dir / PINNED_COMMIT

    def load(self) -> TemplateSet:
        if self._resolved is None:
            self._resolved = self._resolve()
        return self._resolved

    def _resolve(self) -> TemplateSet:
        if self.folder is not None:
            return self.load_folder(self.folder)
        cached = self.load_cache()
        if cached is not None:
            return cached
        problems: list[str] = []
        if self.download_allowed:
            try:
                return self.download()
            except TemplateError as exc:
                problems.append(str(exc))
        else:
            problems.append("downloads are off (offline mode or prompts.download=false)")
        if not self.builtin_fallback:
            raise TemplateError(
                "The released templates are unavailable: " + "; ".join(problems) + ". "
                f"Name a folder with {FOLDER_ENV} or run `interleave-thinker prompts download` online."
            )
        self.fallback_reason = "; ".join(problems)
        logger.info(
            "Released prompt templates unavailable (%s); using interleave-thinker's own templates. "
            "Released checkpoints expect the released templates: run `interleave-thinker prompts download`.",
            "; ".join(problems),
        )
        return builtin_templates()

    def load_folder(self, folder: Path) -> TemplateSet:
        if not folder.is_dir():
            raise TemplateError(
                f"Template folder {folder} does not exist (set by {FOLDER_ENV} or prompts.folder)."
            )
        texts: dict[str, str] = {}
        mismatched: list[str] = []
        for name, ref in RELEASED.items():
            path = folder / f"{name}.txt"
            if not path.is_file():
                continue
            text, digest = read_text(path)
            if digest != ref.sha256:
                if self.verify:
                    raise TemplateError(
                        f"Template {path} does not match the released '{name}' (SHA-256 differs): the file was "
                        "changed. Restore it, or set prompts.verify=false to use edited templates on purpose."
                    )
                mismatched.append(name)
            texts[name] = text
        if not texts:
            raise TemplateError(
                f"Template folder {folder} holds none of {', '.join(n + '.txt' for n in RELEASED)}."
            )
        kind: Literal["released", "custom"] = "custom" if mismatched else "released"
        return TemplateSet(kind=kind, origin=str(folder), texts=texts)

    def load_cache(self) -> TemplateSet | None:
        folder = self.commit_cache
        if not all((folder / f"{name}.txt").is_file() for name in RELEASED):
            return None
        texts = {}
        for name, ref in RELEASED.items():
            path = folder / f"{name}.txt"
            text, digest = read_text(path)
            if digest != ref.sha256:
                raise TemplateError(
                    f"Cached template {path} fails its SHA-256 check (the cache was altered). "
                    "Run `interleave-thinker prompts download --force` to fetch it again."
                )
            texts[name] = text
        return TemplateSet(kind="released", origin=f"cache {folder}", texts=texts)

    def download(self) -> TemplateSet:
        """Fetch the authors' source files at the pinned commit, verify, and cache the templates."""
        texts: dict[str, str] = {}
        for source in sorted({ref.source for ref in RELEASED.values()}):
            url = f"{self.base_url}/{PINNED_COMMIT}/{source}"
            source_text = fetch_text(url, self.timeout)
            wanted = {name: ref for name, ref in RELEASED.items() if ref.source == source}
            literals = extract_literals(source_text, {ref.literal for ref in wanted.values()}, origin=url)
            for name, ref in wanted.items():
                what = f"Template '{name}' ({ref.literal}) downloaded from {url}"
                texts[name] = check_download(literals[ref.literal], ref.sha256, what)
        write_cache({self.commit_cache / f"{name}.txt": text for name, text in texts.items()})
        return TemplateSet(
            kind="released", origin=f"download {self.base_url}@{PINNED_COMMIT[:12]}", texts=texts
        )

    def check(self) -> list[tuple[str, str, str]]:
        """Report (template, where found, status) for every released template, without downloading."""
        rows: list[tuple[str, str, str]] = []
        places = ([self.folder] if self.folder is not None else []) + [self.commit_cache]
        for name, ref in RELEASED.items():
            for place in places:
                path = place / f"{name}.txt"
                if path.is_file():
                    ok = read_text(path)[1] == ref.sha256
                    rows.append((name, str(path), "ok" if ok else "DIGEST MISMATCH"))
                    break
            else:
                rows.append((name, "-", "missing"))
        return rows


BUILTIN_PACKAGE = "interleave_thinker.prompts"
"""Our own templates: the data files of the visible ``prompts/`` package."""


def builtin_templates() -> TemplateSet:
    """Our own templates, written for interleave-thinker with the released placeholders and answer format."""
    root = resources.files(BUILTIN_PACKAGE)
    texts = {
        entry.name.removesuffix(".txt"): entry.read_text(encoding="utf-8")
        for entry in root.iterdir()
        if entry.name.endswith(".txt")
    }
    return TemplateSet(kind="builtin", origin="interleave-thinker built-in templates", texts=texts)
