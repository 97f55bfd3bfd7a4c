"""The benchmarks' official judge prompts, obtained at run time and checked by SHA-256.

The judge prompts of WISE, RISEBench and UEval are the benchmarks' own text, so, like the released
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
from dataclasses import dataclass
from pathlib import Path

from interleave_thinker.core import pinned_texts as pinned
from interleave_thinker.core.errors import TemplateError

FOLDER_ENV = "INTERLEAVE_THINKER_EVAL_PROMPTS"
BASE_URL_ENV = "INTERLEAVE_THINKER_EVAL_PROMPTS_URL"
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class Repo:
    """A scorer's repository at the commit whose texts we reproduce."""

    name: str
    commit: str


WISE_REPO = Repo("PKU-YuanGroup/WISE", "eb51174483a5de2e34e8614cf9dfb3319ee7fcd0")
RISE_REPO = Repo("PhoenixZ810/RISEBench", "5f226519b25c005bb32fb83864bbd1845ab85c23")
UEVAL_REPO = Repo("zlab-princeton/UEval", "3a5b5ea2c4d2d149c41b3f06645f2fd272aca88e")


@dataclass(frozen=True)
class EvalPrompt:
    """Where one judge prompt lives: ``kind`` is ``literal``, ``strip`` or ``message`` (function, index)."""

    repo: Repo
    source: str
    kind: str
    locator: str
    sha256: str
    index: int = 0


def _p(repo: Repo, source: str, kind: str, locator: str, sha: str, index: int = 0) -> EvalPrompt:
    return EvalPrompt(repo, source, kind, locator, sha, index)


_WV, _WL, _MSG = "vllm_eval.py", "WISE_legacy/gpt_eval.py", "build_evaluation_messages"
PROMPTS: dict[str, EvalPrompt] = {
    "wise_verified_system": _p(
        WISE_REPO, _WV, "message", _MSG, "c9b9e5e189408801a05c600dfc385addc37bb1ebe9b933c74202ea72eb415f8c", 0
    ),
    "wise_verified_user": _p(
        WISE_REPO, _WV, "message", _MSG, "b72932ce0313711651a182fc57a89c66393f9e4d7030ce24ca2c403f1aec1ae2", 1
    ),
    "wise_legacy_system": _p(
        WISE_REPO, _WL, "message", _MSG, "1034e394de55d899eb78e5ad09835de551cefa5bfeb0ba4bf452c83f6285ffc0", 0
    ),
    "wise_legacy_user": _p(
        WISE_REPO, _WL, "message", _MSG, "76f6efe6506725cf2aaf3860f0595deb29e68b57649d9a584712fbd39da9bb54", 1
    ),
}
_RISE_DIGESTS = {
    "consist": "84b272d821670cd2466866e27d80bed659dc677964a62a2c1459ad673c4eaf70",
    "reasoning": "2a1a3394442065a25958b03047158bf670dbb0c771c5d9a7d299cdc02eb0c25b",
    "reasoning_w_input": "b781425c015b41a646eae87dea188b871f89a4749a8911281e1e3ac52f050cd0",
    "generation": "2d607960deffa2e1b5178bfbf9f06c865654ddbe35b249caa9e59c616ff6c916",
    "spatial_ref": "df84b77e28183eddb0e822170970bec0a85302844ffae3c4a0effde7ada5279b",
    "spatial_ref_img": "4e043b8e696d40a4be73538134b4182dc5a87a354e5878983c943a536e22e25d",
    "spatial_ref_w_input": "444d3a201c30fb2fe2a88e48aca355c4f075f655c2edc4ae50a6e1fb263c668d",
    "spatial_qual": "3bead46a4b0bcf295700caec5c116809dd72d4a03a750f7bb9da3e2563123c80",
    "spatial_cons": "b20ca629d36da9cf2fa591ef3c1dd5909177b4d245172479345d6fa137c4c55e",
    "logical_cons_ans": "28a6dd5a2e714acf681455acbf8dc01491559ecdcc54523e50a382d1c4689aaf",
    "logical_cons": "49b6870dfb1b4cb64e303d27845794e403d48ef877b85178fea9c48a425475c1",
    "logical_txt": "6719763c72ab8ef9e015ed4efe3ef96c4cd01c0c2cda8457cad1a91ac69eb956",
    "logical_img": "ce89313d6047592decded49f4324000ced3c91f87153ca458dc1f55634e08cd6",
    "logical_img_wo_q": "8cd49d5335cd303c810affa011b21dcd1416fcbb76df00f175ee3af949dcaa8d",
}
for _short, _sha in _RISE_DIGESTS.items():
    PROMPTS[f"rise_prompt_{_short}"] = _p(RISE_REPO, "utils.py", "literal", f"prompt_{_short}", _sha)
_UEVAL_DIGESTS = {
    "system_instruction": "151f6c52b708cef35b72f737cfd550665161f0fd3d2408b82de3f0432d651754",
    "text_template": "8bd035a476d192770211f2539714d5fb0edca6f9d566081500abe4a98008a0e2",
    "text_rubric_template": "471b64de913173510b2673ee80f904144c3ef414a3a3ecd47ab9fd746105442b",
    "image_template_open": "16634b947356b00020e91c34eb8df940479a731bb1f3d2a4a51986ac8410484b",
    "image_rubric_template": "471b64de913173510b2673ee80f904144c3ef414a3a3ecd47ab9fd746105442b",
    "image_template_closed": "1a533115d14edec3c510cf6c411c6d2f4819792aa03a6cf6eb97c846d01216b6",
}
for _short, _sha in _UEVAL_DIGESTS.items():
    PROMPTS[f"ueval_{_short}"] = _p(UEVAL_REPO, "ueval_eval.py", "strip", _short.upper(), _sha)

WISE_VERIFIED_PROMPTS = ("wise_verified_system", "wise_verified_user")
WISE_LEGACY_PROMPTS = ("wise_legacy_system", "wise_legacy_user")
RISE_PROMPTS = tuple(f"rise_prompt_{s}" for s in _RISE_DIGESTS)
UEVAL_PROMPTS = tuple(f"ueval_{s}" for s in _UEVAL_DIGESTS)
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

    def load(self, names: tuple[str, ...], protocol: str) -> PromptSet:
        """The prompts ``names`` of ``protocol`` (its name is only for messages)."""
        if self.folder is not None:
            return PromptSet({n: self._read(self.folder / f"{n}.txt", n) for n in names}, str(self.folder))
        cached = self._cache_paths(names)
        if all(path.is_file() for path in cached.values()):
            return PromptSet({n: self._read(p, n) for n, p in cached.items()}, f"cache {self.cache_dir}")
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

    def _cache_paths(self, names: tuple[str, ...]) -> dict[str, Path]:
        return {n: self.cache_dir / PROMPTS[n].repo.commit / f"{n}.txt" for n in names}

    def _read(self, path: Path, name: str) -> str:
        if not path.is_file():
            raise TemplateError(f"Judge prompt file {path} is missing ({FOLDER_ENV} or the cache).")
        text, digest = pinned.read_text(path)
        if digest != PROMPTS[name].sha256:
            raise TemplateError(
                f"Judge prompt {path} does not match the official '{name}' (SHA-256 differs): the file was "
                "edited or is from another commit. Restore it, or delete it so it is downloaded again."
            )
        return text

    def _download(self, names: tuple[str, ...]) -> dict[str, str]:
        texts: dict[str, str] = {}
        sources: dict[str, str] = {}
        for name in names:
            prompt = PROMPTS[name]
            url = f"{self.base_url}/{prompt.repo.name}/{prompt.repo.commit}/{prompt.source}"
            if url not in sources:
                sources[url] = pinned.fetch_text(url, self.timeout)
            text = extract_prompt(sources[url], prompt, url)
            texts[name] = pinned.check_download(text, prompt.sha256, f"Judge prompt '{name}' from {url}")
        pinned.write_cache({path: texts[name] for name, path in self._cache_paths(names).items()})
        return texts


# -- filling, exactly as the official code does -------------------------------------------------------

WISE_PROMPT_FIELD = "{prompt_data['Prompt']}"
WISE_EXPLANATION_FIELD = "{prompt_data['Explanation']}"


def fill_wise(template: str, prompt: object, explanation: object) -> str:
    """The f-string evaluated with the record: split on the two fields (Prompt first), join the values."""
    head, rest = template.split(WISE_PROMPT_FIELD, 1)
    middle, tail = rest.split(WISE_EXPLANATION_FIELD, 1)
    return head + format(prompt, "") + middle + format(explanation, "") + tail


def fill_ueval(
    template: str, question: str, text_answer: str | None = None, rubric: str | None = None
) -> str:
    """UEval's chained ``.replace`` calls, in the official order."""
    if rubric is not None:
        return template.replace("<<rubric_item>>", rubric)
    return template.replace("<<question>>", question).replace("<<text_answer>>", text_answer or "")
