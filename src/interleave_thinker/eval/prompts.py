"""The benchmarks' official judge prompts, obtained at run time and checked by SHA-256.

A benchmark's judge prompts (``eval/benchmarks/<name>/prompts.py`` says where each lives) are its own text, so, like the released
planner/critic templates, they are never shipped. They are resolved by the rules of
:class:`~interleave_thinker.core.pinned_texts.PinnedStore`, in this order: a folder the user names
(``INTERLEAVE_THINKER_EVAL_PROMPTS``, one ``<name>.txt`` per prompt, e.g. the files of
``shared/reference/eval``); the cache (``~/.cache/interleave-thinker/eval-prompts/<commit>/``); a
download of the scorer's source file at the pinned commit, the literal read with ``ast`` (never
executed) and its digest checked. Three literal shapes occur: a module-level string (RISEBench), a
module-level triple-quoted literal with ``.strip()`` (UEval), and the text of a chat message built
inside a function, the user one an f-string (WISE). An f-string is kept
as a template: constant parts verbatim, each field written ``{`` + ``ast.unparse(expr)`` + ``}``.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from interleave_thinker.core import pinned_texts as pinned
from interleave_thinker.core.errors import TemplateError

FOLDER_ENV = "INTERLEAVE_THINKER_EVAL_PROMPTS"
BASE_URL_ENV = "INTERLEAVE_THINKER_EVAL_PROMPTS_URL"
DEFAULT_BASE_URL = pinned.GITHUB_RAW


@dataclass(frozen=True)
class Repo:
    """A scorer's repository at the commit whose texts we reproduce."""

    name: str
    commit: str

    def raw_url(self, base_url: str, path: str) -> str:
        """Where ``path`` of this repository at :attr:`commit` is served as it is (GitHub's raw host)."""
        return pinned.raw_url(base_url, self.name, self.commit, path)


@dataclass(frozen=True)
class EvalPrompt:
    """Where one judge prompt lives: ``kind`` is ``literal``, ``strip`` or ``message`` (function, index)."""

    repo: Repo
    source: str
    kind: str
    locator: str
    sha256: str
    index: int = 0


EvalPrompts = Mapping[str, EvalPrompt]
"""A protocol's judge prompts by name (``<name>.txt`` in a folder or the cache), each where it lives."""
PINS_FILE = "prompts.json"
"""Beside a benchmark's ``prompts.py``: where its judge prompts live (the scorer's repository at a commit,
the source file, the literal's shape) and each prompt's locator and SHA-256: data, read by
:func:`pinned_prompts`."""


def pinned_prompts(module: str) -> tuple[Repo, dict[str, EvalPrompt]]:
    """The repository and the judge prompts that the :data:`PINS_FILE` beside ``module`` (a benchmark's
    ``prompts`` module, by its ``__name__``) pins."""
    package = module.rpartition(".")[0]
    pins = json.loads(resources.files(package).joinpath(PINS_FILE).read_text(encoding="utf-8"))
    repo = Repo(pins["repo"], pins["commit"])
    source, kind = pins["source"], pins["kind"]
    prompts = {
        name: EvalPrompt(repo, source, kind, where["locator"], where["sha256"])
        for name, where in pins["prompts"].items()
    }
    return repo, prompts


DOWNLOAD_COMMAND = "interleave-thinker eval prompts download"
"""The command that fetches, checks and caches the judge prompts (run it once where the network is)."""


def how_to_get(protocol: str) -> str:
    """The two ways to give a scoring run its judge prompts, for an error message."""
    return (
        f"run `{DOWNLOAD_COMMAND} {protocol}` once where github.com is reachable (it fills the cache), "
        f"or set {FOLDER_ENV} to a folder of <name>.txt files"
    )


class JudgePromptsUnavailable(TemplateError):
    """A protocol's judge prompts are neither in a folder nor in the cache, and could not be downloaded."""

    def __init__(self, protocol: str, reason: str) -> None:
        super().__init__(f"{reason}. Scoring {protocol} needs its judge prompts: {how_to_get(protocol)}.")
        self.protocol, self.reason = protocol, reason


@dataclass(frozen=True)
class PromptSet:
    """Resolved judge prompts of one protocol, with where they came from (recorded in the summary)."""

    texts: dict[str, str]
    origin: str

    def digests(self) -> dict[str, str]:
        return {name: pinned.sha256_text(text) for name, text in sorted(self.texts.items())}


# -- extraction from the official source -------------------------------------------------------------


def _fstring_template(node: ast.JoinedStr, origin: str) -> str:
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif isinstance(value, ast.FormattedValue) and value.conversion == -1 and value.format_spec is None:
            parts.append("{" + ast.unparse(value.value) + "}")
        else:
            raise TemplateError(f"{origin}: unexpected f-string field {ast.dump(value)[:80]}.")
    return "".join(parts)


def _string_of(node: ast.expr, origin: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return _fstring_template(node, origin)
    raise TemplateError(f"{origin}: the prompt is not a string literal or f-string.")


def _dict_get(node: ast.expr, key: str) -> ast.expr | None:
    if not isinstance(node, ast.Dict):
        return None
    for k, v in zip(node.keys, node.values, strict=True):
        if isinstance(k, ast.Constant) and k.value == key:
            return v
    return None


def _message_text(source: str, function: str, index: int, origin: str) -> str:
    """``messages[index]["content"][0]["text"]`` of the first list of role dicts inside ``function``."""
    tree = ast.parse(source)
    for func in ast.walk(tree):
        if not (isinstance(func, ast.FunctionDef) and func.name == function):
            continue
        for node in ast.walk(func):
            if not (isinstance(node, ast.List) and len(node.elts) > index):
                continue
            content = _dict_get(node.elts[index], "content")
            if _dict_get(node.elts[index], "role") is None or not isinstance(content, ast.List):
                continue
            text = _dict_get(content.elts[0], "text") if content.elts else None
            if text is not None:
                return _string_of(text, origin)
    raise TemplateError(f"{origin}: no message {index} in {function}(); is this the pinned file?")


def _stripped_literal(source: str, name: str, origin: str) -> str:
    """A module-level ``NAME = \"\"\"...\"\"\".strip()``: the value after ``.strip()``."""
    for node in ast.parse(source).body:
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            continue
        value = node.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "strip"
            and not value.args
        ):
            return _string_of(value.func.value, origin).strip()
        return _string_of(value, origin)
    raise TemplateError(f"{origin} does not define {name}.")


def extract_prompt(source: str, prompt: EvalPrompt, origin: str) -> str:
    """The prompt text from the scorer's source, the way the official code evaluates it."""
    try:
        if prompt.kind == "literal":
            return pinned.extract_literals(source, {prompt.locator}, origin=origin)[prompt.locator]
        if prompt.kind == "strip":
            return _stripped_literal(source, prompt.locator, origin)
        return _message_text(source, prompt.locator, prompt.index, origin)
    except SyntaxError as exc:
        raise TemplateError(f"{origin} is not valid Python ({exc}).") from exc


# -- the store ----------------------------------------------------------------------------------------


class EvalPromptStore(pinned.PinnedStore):
    """Folder, then cache, then download at the pinned commit; every text checked by SHA-256."""

    FOLDER_ENV = FOLDER_ENV
    BASE_URL_ENV = BASE_URL_ENV
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    CACHE_NAME = "eval-prompts"

    def load(self, names: EvalPrompts, protocol: str) -> PromptSet:
        """The prompts ``names`` of ``protocol`` (its name is only for messages)."""
        if self.folder is not None:
            return PromptSet(
                {n: self._read(self.folder / f"{n}.txt", names[n]) for n in names}, str(self.folder)
            )
        cached = self._cache_paths(names)
        if all(path.is_file() for path in cached.values()):
            return PromptSet(
                {n: self._read(p, names[n]) for n, p in cached.items()}, f"cache {self.cache_dir}"
            )
        if not self.download_allowed:
            raise JudgePromptsUnavailable(
                protocol,
                f"The {protocol} judge prompts are not in the cache {self.cache_dir} and downloads are off "
                "(offline mode)",
            )
        try:
            texts = self._download(names)
        except TemplateError as exc:
            if "Could not download" not in str(exc):
                raise
            raise JudgePromptsUnavailable(protocol, str(exc).rstrip(".")) from None
        return PromptSet(texts, f"download {self.base_url}")

    def _cache_paths(self, names: EvalPrompts) -> dict[str, Path]:
        return {n: self.cache_dir / prompt.repo.commit / f"{n}.txt" for n, prompt in names.items()}

    def _read(self, path: Path, prompt: EvalPrompt) -> str:
        name = path.stem
        if not path.is_file():
            raise TemplateError(f"Judge prompt file {path} is missing ({FOLDER_ENV} or the cache).")
        text, digest = pinned.read_text(path)
        if digest != prompt.sha256:
            raise TemplateError(
                f"Judge prompt {path} does not match the official '{name}' (SHA-256 differs): the file was "
                "edited or is from another commit. Restore it, or delete it so it is downloaded again."
            )
        return text

    def _download(self, names: EvalPrompts) -> dict[str, str]:
        texts: dict[str, str] = {}
        sources: dict[str, str] = {}
        for name, prompt in names.items():
            url = prompt.repo.raw_url(self.base_url, prompt.source)
            if url not in sources:
                sources[url] = pinned.fetch_text(url, self.timeout)
            text = extract_prompt(sources[url], prompt, url)
            texts[name] = pinned.check_download(text, prompt.sha256, f"Judge prompt '{name}' from {url}")
        pinned.write_cache({path: texts[name] for name, path in self._cache_paths(names).items()})
        return texts
