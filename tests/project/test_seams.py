"""The seams between the loop's opt-in features and the rest stay declared (issue 42): counts kept by
the AST or a grep over the package, each with the number it was brought down to.

Why: a feature joined through a side door is how the repaired image once went unscored (the pages showed
it, the benchmark layouts read the original); these counts keep each fact in one place.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import interleave_thinker
from tests.helpers.common import parse_python

PACKAGE = Path(interleave_thinker.__file__).parent


def source(relative: str) -> str:
    return (PACKAGE / relative).read_text(encoding="utf-8")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@functools.cache
def tree(path: Path) -> ast.Module:
    """The module's AST, parsed once for every check here."""
    return parse_python(path.read_text(encoding="utf-8"))


def classes_named(name: str) -> list[str]:
    """The modules that define a class ``name``."""
    return [
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        for node in ast.walk(tree(path))
        if isinstance(node, ast.ClassDef) and node.name == name
    ]


# --- the sequence as shown ----------------------------------------------------------------------

FINISHED_RUN_READERS = (
    "eval/layouts.py",
    "eval/benchmarks/consistency/scorer.py",
    "eval/consistency_scorers.py",
    "runtime/reports.py",
    "runtime/documents.py",
    "runtime/pipeline.py",
)
"""Modules that read a finished run's images: they ask the trace for the shown sequence, never pick
``StepRecord.accepted_image`` themselves."""


def test_readers_of_a_finished_run_ask_the_trace_for_the_shown_images() -> None:
    picking = [m for m in FINISHED_RUN_READERS if "accepted_image" in source(m)]
    assert picking == []
    asking = [
        m for m in FINISHED_RUN_READERS if "shown_" not in source(m) and "read_sequence" not in source(m)
    ]
    assert asking == []


def test_one_ueval_row_builder() -> None:
    """A dict literal with an ``image_answer`` key is built in one place."""
    builders = [
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        for node in ast.walk(tree(path))
        if isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "image_answer" for k in node.keys)
    ]
    assert builders == ["runtime/reports.py"]


# --- the loop's opt-in features enter at one named call each --------------------------------------


def test_one_class_named_step_loop_and_no_feature_reaches_through_it() -> None:
    assert classes_named("StepLoop") == ["runtime/loop.py"]
    reaching = [p.relative_to(PACKAGE).as_posix() for p in modules() if "loop.loop." in p.read_text("utf-8")]
    assert reaching == []


def attributes_set_on_built(tree: ast.AST, constructor: str) -> list[str]:
    """``name.attr = ...`` where ``name`` was bound to ``constructor(...)`` in the same function."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        built = {
            target.id
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == constructor
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        found += [
            f"{target.value.id}.{target.attr}"
            for node in ast.walk(function)
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id in built
        ]
    return found


def test_the_scheduler_sets_no_attribute_on_a_built_pipeline() -> None:
    assert attributes_set_on_built(parse_python(source("runtime/scheduler.py")), "Pipeline") == []
    caught = "def f(p):\n    limited = Pipeline(planner=p)\n    limited.judge = p.judge\n"
    assert attributes_set_on_built(parse_python(caught), "Pipeline") == ["limited.judge"]


def test_the_loop_module_stays_short() -> None:
    assert len(source("runtime/loop.py").splitlines()) <= 320


# --- optional backend members, declared and read in one place -------------------------------------

OPTIONAL_MEMBERS = frozenset(
    {
        "cooperative",
        "set_concurrency",
        "capacity",
        "max_references",
        "close",
        "spec",
        "inner",
        "name",
        "last_usage",
        "generator_device",
    }
)
"""The members a backend may lack (``backends/protocols.py``), read only by ``backends/wrapping.py``."""


def optional_member_reads(tree: ast.AST) -> list[str]:
    """``getattr(x, "<optional member>", ...)`` calls in ``tree``."""
    return [
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in OPTIONAL_MEMBERS
    ]


def test_optional_backend_members_are_read_only_by_the_wrapper_module() -> None:
    reads = {
        path.relative_to(PACKAGE).as_posix(): found
        for path in modules()
        if path.relative_to(PACKAGE).as_posix() != "backends/wrapping.py"
        if (found := optional_member_reads(tree(path)))
    }
    assert reads == {}
    assert optional_member_reads(parse_python('getattr(b, "capacity", None)')) == ["capacity"]


def test_one_walker_of_wrapper_chains() -> None:
    """Only ``backends/wrapping.chain`` follows ``.inner`` in a loop."""
    walkers = [
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        for node in ast.walk(tree(path))
        if isinstance(node, ast.While | ast.For)
        and ("'inner'" in ast.unparse(node) or ".inner" in ast.unparse(node))
    ]
    assert walkers == ["backends/wrapping.py"]


def test_chat_defaults_are_stated_once() -> None:
    """Signatures default ``max_new_tokens`` to ``protocols.MAX_NEW_TOKENS``; pass-through chats take
    ``**options: Unpack[ChatOptions]`` and state none."""
    literal = [
        p.relative_to(PACKAGE).as_posix()
        for p in modules()
        if "max_new_tokens: int = 4096" in p.read_text("utf-8")
    ]
    assert len(literal) <= 1, literal
    stating = sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in modules()
        for _ in re.finditer(
            r"max_new_tokens: int = (?:4096|MAX_NEW_TOKENS)\b|temperature: float \| None = 0\.0",
            p.read_text("utf-8"),
        )
    )
    # the protocol's chat and chat_batch and ChatCall; a teacher's dataclass; the retry policy's own field
    assert stating == ["agents/retry.py", *["backends/protocols.py"] * 3, "datagen/prompts_run.py"], stating
    for relative in ("ui/worker.py", "datagen/generate_usage.py", "eval/base_mode.py"):
        assert "Unpack[" in source(relative) and "MAX_NEW_TOKENS" not in source(relative), relative


# --- one source per fact at the seams -----------------------------------------------------------


def test_one_request_error_in_the_one_hierarchy() -> None:
    from interleave_thinker.core.errors import InputError, RequestError

    assert classes_named("RequestError") == ["core/errors.py"]
    assert issubclass(RequestError, InputError) and "RequestError" in source("core/errors.py").split('"""')[1]
    refused = RequestError(404, "no such model \udcff")
    assert (refused.status, refused.message, refused.headers) == (404, "no such model ?", {})


def test_kinds_declare_their_own_locality() -> None:
    """``tiny`` says itself that it is local and takes an empty target: no list of kinds in backends/,
    runtime/ or cli/ names it (two prefix checks remain: cli/scoring.py, runtime/documents.py)."""
    from interleave_thinker.backends.specs import EMPTY_TARGET_KINDS, is_local

    assert is_local("tiny:planner-sft") and is_local("diffusers:x") and not is_local("http:http://h")
    assert "tiny" in EMPTY_TARGET_KINDS
    naming = [
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        if path.relative_to(PACKAGE).parts[0] in ("backends", "runtime", "cli")
        for node in ast.walk(tree(path))
        if isinstance(node, ast.Set | ast.Tuple | ast.List)
        and any(isinstance(e, ast.Constant) and e.value == "tiny" for e in node.elts)
    ]
    assert naming == []


def test_the_cli_checks_specs_with_the_backend_registry_s_validator() -> None:
    """`cli/specs.check_spec` adds the flag's name; the syntax and the kinds are `backends/specs.parse_spec`'s."""
    assert 'partition(":")' not in source("cli/specs.py") and "parse_spec(" in source("cli/specs.py")


# --- a benchmark is a folder, named only there and in the registry ---------------------------------

BENCHMARK_NAME = re.compile(r"(?<![a-z-])(ueval|wise|rise|risebench)(?![a-z])", re.IGNORECASE)
"""The published benchmarks' names as a word (``step-wise``, ``raise`` and ``otherwise`` are not); our own
``custom`` and ``consistency`` are ordinary words elsewhere and are not counted."""


def named_words(tree: ast.AST) -> list[str]:
    """Identifiers, imported modules and string constants of ``tree``, docstrings and bare strings left out."""
    bare = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    found: list[str | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.Attribute | ast.keyword):
            found.append(node.attr if isinstance(node, ast.Attribute) else node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.arg):
            found.append(node.arg)
        elif isinstance(node, ast.alias):
            found += [node.name, node.asname]
        elif isinstance(node, ast.ImportFrom):
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare:
            found.append(node.value)
    return [w for w in found if w and BENCHMARK_NAME.search(w.replace("_", " ").replace(".", " "))]


def test_benchmark_names_stay_in_their_folders() -> None:
    """`eval/*.py` (top level), `cli/` and `runtime/` ask the registry (`eval/benchmarks/__init__.py`);
    each benchmark's reader, prompts, scorer and help texts are in `eval/benchmarks/<name>/`."""
    naming = {
        relative: found
        for path in modules()
        if (parts := path.relative_to(PACKAGE).parts)[0] in ("cli", "runtime")
        or (parts[0] == "eval" and len(parts) == 2)
        if (found := named_words(tree(path)))
        for relative in [path.relative_to(PACKAGE).as_posix()]
    }
    assert naming == {}
    sample = 'from x import score_ueval\nHELP = "rise only"\nSTEP = "step-wise"\ndef f():\n    """UEval."""\n'
    assert named_words(parse_python(sample)) == ["score_ueval", "rise only"]


def test_one_rule_for_a_spec_s_syntax() -> None:
    """The settings and the backend registry both split a spec with `core/spec_syntax.split_spec`."""
    stating = [
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        if "no backend kind" in path.read_text("utf-8")
    ]
    assert stating == ["core/spec_syntax.py"]
    assert "split_spec(" in source("core/config.py") and "split_spec(" in source("backends/specs.py")


def test_flag_defaults_have_one_source() -> None:
    """A flag's default is read from where the value is defined (the judge agent's reply bound, the
    scheduling flags' dataclass), not written again beside the flag."""
    from interleave_thinker.agents.judge import Judge
    from interleave_thinker.cli.options import SCHEDULING_FLAGS, SchedulingFlags
    from interleave_thinker.cli.scoring import JUDGE_TOKENS

    restating = [
        p.relative_to(PACKAGE).as_posix() for p in modules() if "TokensOption = 1024" in p.read_text("utf-8")
    ]
    assert restating == [] and JUDGE_TOKENS == Judge.DEFAULT_MAX_NEW_TOKENS
    dataclass_defaults = vars(SchedulingFlags())
    assert {n: d for n, (_, d) in SCHEDULING_FLAGS.items() if d is not None} == {
        n: dataclass_defaults[n] for n, (_, d) in SCHEDULING_FLAGS.items() if d is not None
    }


FLAGS_FROM_SETTINGS = {
    "cli/serve_generator.py": ("server/generator/settings.py", "ServiceSettings"),
    "cli/serve_vlm.py": ("server/settings.py", "VLMLimits"),
    "cli/eval_score.py": ("eval/score_run.py", "ScoreOptions"),
    "cli/eval_run.py": ("eval/score_run.py", "ScoreOptions"),
}
"""Commands whose flags fill a settings object: module -> where the object is defined, and its name."""
SHARED_SERVICE_FLAGS = ("host", "read_timeout", "log_level", "max_body_mb", "max_pixels")


def literal_flag_defaults(command_module: str, fields: set[str]) -> list[str]:
    """The parameters of the module's commands that write a constant as their default while a settings
    field holds the value (by name; ``max_body_mb`` fills ``max_body_bytes``)."""
    found = []
    for node in ast.walk(tree(PACKAGE / command_module)):
        if not isinstance(node, ast.FunctionDef):
            continue
        arguments = node.args.args + node.args.kwonlyargs
        defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
        defaults += list(node.args.kw_defaults)
        for argument, default in zip(arguments, defaults, strict=True):
            if default is None or (isinstance(default, ast.Constant) and default.value is None):
                continue  # no default, or None: the flag not given
            # a constant, or arithmetic of constants (64.0, 20 * 1024)
            written = not any(isinstance(n, ast.Name | ast.Attribute) for n in ast.walk(default))
            if written and (argument.arg in fields or argument.arg in SHARED_SERVICE_FLAGS):
                found.append(f"{command_module}:{argument.arg}")
    return found


def test_service_and_scoring_flags_take_their_defaults_from_the_settings() -> None:
    """`serve generator`, `serve vlm` and `--judge-concurrency` (`eval score`, `eval run`) read their flags'
    defaults from the fields those flags fill: no constant written again beside the flag."""
    import dataclasses
    import inspect

    from interleave_thinker.cli import eval_run, eval_score, serve_generator, serve_vlm
    from interleave_thinker.eval.score_run import ScoreOptions
    from interleave_thinker.server.generator.settings import ServiceSettings
    from interleave_thinker.server.settings import VLMLimits

    restating = []
    for module, (defined_in, name) in FLAGS_FROM_SETTINGS.items():
        settings = next(
            n for n in ast.walk(tree(PACKAGE / defined_in)) if isinstance(n, ast.ClassDef) and n.name == name
        )
        fields = {
            s.target.id
            for s in settings.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        }
        restating += literal_flag_defaults(module, fields)
    assert restating == []

    def defaults(command: object) -> dict[str, object]:
        return {n: p.default for n, p in inspect.signature(command).parameters.items()}  # type: ignore[arg-type]

    service = {f.name: f.default for f in dataclasses.fields(ServiceSettings)}
    generator = defaults(serve_generator.command)
    shared = (
        "host",
        "port",
        "queue_size",
        "timeout",
        "max_pixels",
        "max_prompt_chars",
        "read_timeout",
        "log_level",
    )
    assert {n: generator[n] for n in shared} == {n: service[n] for n in shared}
    assert generator["max_body_mb"] * 1024 * 1024 == service["max_body_bytes"]  # type: ignore[operator]
    vlm, limits = defaults(serve_vlm.command), vars(VLMLimits())
    assert {n: vlm[n] for n in limits if n != "max_body_bytes"} == {
        n: v for n, v in limits.items() if n != "max_body_bytes"
    }
    assert vlm["max_body_mb"] * 1024 * 1024 == limits["max_body_bytes"]  # type: ignore[operator]
    assert (vlm["host"], vlm["read_timeout"], vlm["log_level"]) == (
        service["host"],
        service["read_timeout"],
        service["log_level"],
    )
    scoring = {f.name: f.default for f in dataclasses.fields(ScoreOptions)}
    for command in (eval_score.score, eval_run.run):
        given = defaults(command)
        assert {n: given[n] for n in ("judge_concurrency", "scorer_version", "request_mode")} == {
            n: scoring[n] for n in ("judge_concurrency", "scorer_version", "request_mode")
        }


# --- the one exception hierarchy ---------------------------------------------------------------------

INTERNAL_EXCEPTIONS = {
    "backends/encoding.py:ImageTooLarge": "caught by the image backends, raised again as their BackendError",
    "backends/hub_download.py:HubRefused": "caught with the transport's errors: ModelNotFoundError naming the repo",
    "backends/remote.py:RetryableError": "the retry loop's signal; its last one becomes a BackendError",
    "backends/vlm/openai_backend.py:MalformedReply": "caught in the backend: BackendError naming the server",
    "core/images.py:ImageRefused": "caught at the boundaries (core/untrusted.py, ui/limits.py): InputError",
    "core/literal.py:_DuplicateKey": "caught in the literal reader: its ParseError",
    "server/generator/pool.py:QueueFull": "the service's 503 (server/generator/app.py)",
    "server/generator/pool.py:JobTimeout": "the service's 504 (server/generator/app.py)",
    "server/generator/pool.py:ClientGone": "a client that left: nothing to answer (server/generator/app.py)",
    "server/limits.py:BodyTooLarge": "the body reader's signal: the 413 reply",
    "ui/worker.py:RunCancelled": "the page's stop button: the worker ends the run quietly",
}
"""Exception classes outside the hierarchy, each a signal between two functions, translated where named."""


def defined_exceptions() -> dict[str, list[str]]:
    """``module:Class`` -> its base names, for every exception class the package defines (by the AST:
    a class deriving from a builtin exception, or from such a class)."""
    classes = {
        f"{path.relative_to(PACKAGE).as_posix()}:{node.name}": [
            ast.unparse(b).split(".")[-1] for b in node.bases
        ]
        for path in modules()
        if not path.relative_to(PACKAGE).as_posix().startswith("testing/")
        for node in ast.walk(tree(path))
        if isinstance(node, ast.ClassDef)
    }
    exceptions: dict[str, list[str]] = {}
    for _ in range(4):  # subclasses of subclasses, a few levels deep
        known = {key.split(":")[1] for key in exceptions} | {
            "Exception",
            "ValueError",
            "RuntimeError",
            "OSError",
        }
        exceptions |= {key: bases for key, bases in classes.items() if set(bases) & known}
    return exceptions


def test_every_exception_is_in_the_one_hierarchy_or_a_named_internal_signal() -> None:
    """A user sees only errors of `core/errors.py`'s tree (drawn in its docstring); an exception class of
    its own elsewhere is an internal signal, listed above with where it is translated."""
    from interleave_thinker.core import errors

    tree_names = {
        name for name, obj in vars(errors).items() if isinstance(obj, type) and issubclass(obj, Exception)
    }
    drawn = errors.__doc__ or ""
    assert sorted(n for n in tree_names if n not in drawn) == []
    exceptions = defined_exceptions()
    in_tree = set(tree_names)
    for _ in range(4):  # subclasses of subclasses, a few levels deep
        in_tree |= {key.split(":")[1] for key, bases in exceptions.items() if set(bases) & in_tree}
    outside = sorted(key for key in exceptions if key.split(":")[1] not in in_tree)
    assert outside == sorted(INTERNAL_EXCEPTIONS)


def test_served_backends_and_wrappers_declare_served_backend() -> None:
    """Every served backend (`RemoteBackend`) and every wrapper states `ServedBackend` as a base, so mypy
    checks their members against it; a user's object without them still works (read in `wrapping.py`)."""
    from interleave_thinker.backends.protocols import ServedBackend
    from interleave_thinker.backends.remote_backend import RemoteBackend
    from interleave_thinker.backends.wrapping import Wrapper

    assert ServedBackend in RemoteBackend.__mro__ and ServedBackend in Wrapper.__mro__


# --- what a user-facing error says ----------------------------------------------------------------

USER_ERRORS = {
    "ConfigError": 0,
    "InputError": 0,
    "TraceVersionError": 0,
    "TemplateError": 0,
    "StorageError": 0,
    "ModelNotFoundError": 0,
    "RunFailedError": 0,
    "RequestError": 1,
}
"""The errors of the tree whose cause is the user's to fix (a flag, a key, a file, a request), by the
position of their message argument; a backend's or a model's failure (BackendError, ParseError,
PlanningError) names the service or the reply instead."""
AT_FAULT = re.compile(
    r"\{\}"  # the value, path or key at fault, formatted in
    r"|--[a-z]"  # a flag
    r"|\b[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\b"  # a settings key (loop.max_attempts) or a file (trace.json)
    r"|'[^' ]+'|`[^`]+`|<[a-z_]+>"  # a quoted key, command or placeholder
    r"|/"  # a path
    r"|^[a-z_]+(?:\[\d*\])?:"  # a field's name leading the message (``stream_options: ...``)
    r"|\b[a-z-]+: ",  # a spec kind (``http:``)
    re.IGNORECASE,
)
"""What names the field, flag or file at fault."""
FIX = re.compile(
    r"\b(?:give|use|set|run|write|add|remove|pass|install|check|put|drop|leave|choose|export|fix|rename|delete"
    r"|move|free|start|try|make|point|name|see|pick|keep|call|wait|lower|increase|reduce|split|download|update"
    r"|upgrade|enable|disable|omit|replace|continue|resume|restore|copy|open|send|ask|say|change|resize|retry"
    r"|compare|score|must|should|needs?|expected|expects|takes?|one of|at least|at most|only|instead|known"
    r"|no such|does not exist|missing|not valid|not UTF-8|larger than|longer than|more than|over (?:the|this)"
    r"|limit|out of range|outside|already used|unknown|cannot (?:be )?read|not (?:a )?readable"
    r"|could not be decoded|holds no|holds none|lists no|does not define|does not resolve)\b"
    r"|\bnot an? |e\.g\.",
    re.IGNORECASE,
)
"""What says how to fix it: the action, or the constraint the value must meet."""
RELAYED = 10
"""A message with fewer letters of its own than this relays another one (``f"{where}: {exc}"``)."""


KNOWN_MESSAGES = frozenset(
    {
        "backends/_loading.py: Empty checkpoint reference; give a local folder or a Hugging Face id.",
        "backends/hub.py: Model {} is not downloaded and the Hugging Face hub at {} cannot be reached ({}): {}.",
        "backends/vlm/transformers_backend.py: {}: the processor refused the conversation: {}",
        "eval/benchmarks/ueval/scorer.py: an image_answer {}.",
        "eval/calibration/viescore.py: {}: no human ratings for model {} in {}.",
        "eval/calibration/viescore.py: {}: no <task>/<model>/SC.json and PQ.json answers.",
        "eval/prompts.py: {}: unexpected f-string field {}.",
        "eval/prompts.py: {}: no message {} in {}(); is this the pinned file?",
        "runtime/pipeline.py: The request text is empty; say what to generate.",
        "server/generator/app.py: The client closed the connection.",
        "server/generator/app.py: Generation timed out: no reply within the service's --timeout of {}s.",
        "server/generator/guards.py: The body of {} bytes {}.",
        "server/generator/guards.py: The client closed the connection before sending the whole body.",
        "server/generator/openai_protocol.py: Model mismatch: request specifies '{}' but server is running '{}'.",
        "train/data/rules.py: Invalid rules file {}: {}",
        "train/sft/templates.py: The checkpoint's processor has no chat template; SFT needs one to render turns.",
        "ui/options.py: Advanced setting {}: {}.",
    }
)
"""Messages the rules above misread or that have no fix to give, each read and kept as they are (a ratchet:
a new one fails, a mended one must leave the list): the fix is in a value formatted in (the hub's offline
hint, pydantic's or the processor's own words), the thing at fault is named in words (the request text,
the checkpoint, the judge's answers), the upstream file changed (the pinned prompts: a bug to report), or
nobody is there to read it (a client that left)."""


def message_skeleton(node: ast.expr) -> str | None:
    """A message as written, each formatted value as ``{}``; None when it is not written at the raise (a
    variable, a call): such messages are built and checked where they are written."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = message_skeleton(node.left), message_skeleton(node.right)
        return None if left is None and right is None else (left or "{}") + (right or "{}")
    return None


def unhelpful_messages(module: ast.Module) -> list[tuple[int, str]]:
    """``(line, message)`` of every user-facing error raised with a message that names nothing at fault or
    says no fix."""
    found = []
    for node in ast.walk(module):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        name = ast.unparse(node.exc.func).split(".")[-1]
        where = USER_ERRORS.get(name)
        if where is None or len(node.exc.args) <= where:
            continue
        text = message_skeleton(node.exc.args[where])
        if text is None or len(re.sub(r"\{\}|\W", "", text)) < RELAYED:
            continue  # written elsewhere, or another message relayed ("{}: {}"): checked where it is written
        if not (AT_FAULT.search(text.replace("e.g.", "")) and FIX.search(text)):
            found.append((node.lineno, text))
    return sorted(found)


def test_user_facing_errors_name_what_is_at_fault_and_the_fix() -> None:
    """Every ConfigError, InputError, ... raised in the package with its message written at the raise names
    the flag, key, file or value at fault and says how to fix it (or the rule the value must meet)."""
    unhelpful = {
        f"{relative}: {text}"
        for path in modules()
        if not (relative := path.relative_to(PACKAGE).as_posix()).startswith("testing/")
        for _, text in unhelpful_messages(tree(path))
    }
    assert sorted(unhelpful - KNOWN_MESSAGES) == [] and sorted(KNOWN_MESSAGES - unhelpful) == []
    bad = (
        "def f(x, path):\n"
        "    raise ConfigError('Invalid value.')\n"  # names nothing, no fix
        "    raise InputError(f'{path} went wrong somewhere')\n"  # names the file, no fix or rule
        "    raise ConfigError('--max-attempts: give a whole number of at least 1.')\n"
        "    raise InputError(f'{path}: no such file; give an existing image.')\n"
        "    raise RequestError(400, 'bad request')\n"
        "    raise ConfigError(message)\n"  # built elsewhere: checked where it is written
    )
    assert unhelpful_messages(parse_python(bad)) == [
        (2, "Invalid value."),
        (3, "{} went wrong somewhere"),
        (6, "bad request"),
    ]
