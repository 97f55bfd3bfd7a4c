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

PACKAGE = Path(interleave_thinker.__file__).parent


def source(relative: str) -> str:
    return (PACKAGE / relative).read_text(encoding="utf-8")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@functools.cache
def tree(path: Path) -> ast.Module:
    """The module's AST, parsed once for every check here."""
    return ast.parse(path.read_text(encoding="utf-8"))


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
    assert attributes_set_on_built(ast.parse(source("runtime/scheduler.py")), "Pipeline") == []
    caught = "def f(p):\n    limited = Pipeline(planner=p)\n    limited.judge = p.judge\n"
    assert attributes_set_on_built(ast.parse(caught), "Pipeline") == ["limited.judge"]


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
    assert optional_member_reads(ast.parse('getattr(b, "capacity", None)')) == ["capacity"]


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
    assert named_words(ast.parse(sample)) == ["score_ueval", "rise only"]


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
