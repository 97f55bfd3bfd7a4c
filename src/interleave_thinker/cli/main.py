"""The ``interleave-thinker`` command line."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import warnings
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from interleave_thinker.cli import (
    batch,
    data,
    data_export,
    data_generate,
    data_prompts,
    scoring,
    serve_generator,
    serve_vlm,
    train,
    train_grpo,
)
from interleave_thinker.cli import demo as demo_cli
from interleave_thinker.cli import eval as eval_cli
from interleave_thinker.cli.options import SettingsFlags, quiet_diffusers, with_settings
from interleave_thinker.core.config_keys import field_help
from interleave_thinker.core.errors import (
    ConfigError,
    InputError,
    InterleaveThinkerError,
    ModelNotFoundError,
    StorageError,
    TemplateError,
)
from interleave_thinker.core.redact import redact_credentials
from interleave_thinker.core.storage import check_out_folder, storage_error

app = typer.Typer(
    name="interleave-thinker",
    help="Interleaved text-and-image generation with a planner and a critic around any image generator.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
prompts_app = typer.Typer(help="Obtain and check the released prompt templates.", no_args_is_help=True)
app.add_typer(prompts_app, name="prompts")
serve_app = typer.Typer(
    help="Run the generator service or an OpenAI-compatible chat server.", no_args_is_help=True
)
app.add_typer(serve_app, name="serve")
serve_app.command("generator")(serve_generator.command)
serve_app.command("vlm")(serve_vlm.command)
app.add_typer(data.app, name="data")
data.app.command("export")(data_export.export)
data.app.command("prompts")(data_prompts.prompts)
data.app.command("generate")(data_generate.generate)
app.add_typer(train.app, name="train")
app.add_typer(eval_cli.app, name="eval")
train.app.command("grpo", context_settings=train.CONFIG_FLAGS, epilog=train.CONFIG_FLAGS_HELP)(
    train_grpo.grpo
)
app.command("judge")(scoring.judge)
app.command("batch")(batch.batch)
app.command("report")(batch.report)
app.command("reward")(scoring.reward)
app.command("demo")(demo_cli.demo)

console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"interleave-thinker {version('interleave-thinker')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Interleaved text-and-image generation with a planner and a critic around any image generator."""


USAGE_ERRORS = (ConfigError, InputError, TemplateError, ModelNotFoundError)


def default_out_dir(prompt: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:40] or "run"
    return Path("runs") / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{slug}"


def run_folder(out: Path | None, prompt: str, resume: bool) -> Path:
    """The run's output folder: a new one, or (``--resume``) the one holding the run to continue."""
    if resume and out is None:
        raise InputError("--resume needs --out: the folder of the run to continue.")
    out_dir = out or default_out_dir(prompt)
    if (out_dir / "trace.json").exists() and not resume:
        raise InputError(
            f"Output folder {out_dir} already holds a run (trace.json); add --resume to continue it, "
            "or choose another --out."
        )
    return out_dir


ResumeFromOption = Annotated[
    Path | None,
    typer.Option(help="A run folder to redo from --redo-step on, into a new --out (the request is its own)."),
]
RedoStepOption = Annotated[
    int | None, typer.Option(min=1, help="With --resume-from: the first step generated again (1-based).")
]
InstructionOption = Annotated[
    str | None, typer.Option(help="With --resume-from: the new instruction of the --redo-step step.")
]


@app.command()
@with_settings(pipeline=True)
def run(
    settings: SettingsFlags,
    prompt: Annotated[
        str | None,
        typer.Argument(help="The request. Mark input image positions with <image>. None with --resume-from."),
    ] = None,
    image: Annotated[list[Path] | None, typer.Option("--image", help="Input image, repeat in order.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output folder \\[default: runs/<timestamp>-<slug>].")
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the interrupted run in --out after its last complete step.")
    ] = False,
    resume_from: ResumeFromOption = None,
    redo_step: RedoStepOption = None,
    instruction: InstructionOption = None,
) -> None:
    """Plan, generate and check one request; write trace.json, images/, document.md and index.html."""
    if resume_from is not None or redo_step is not None or instruction is not None:
        redo(settings, resume_from, redo_step, instruction, prompt, out, image)
        return
    if prompt is None:
        raise InputError(
            "Give the request text (or --resume-from RUN --redo-step K to redo a run from a step)."
        )
    from interleave_thinker.backends.specs import check_specs
    from interleave_thinker.cli.progress import LoadingDisplay, RichObserver
    from interleave_thinker.runtime.fallbacks import fallback_counts, fallback_line
    from interleave_thinker.runtime.opt_in import repair_lines
    from interleave_thinker.runtime.outlock import folder_lock
    from interleave_thinker.runtime.pipeline import Pipeline, load_input_images, normalize_request_text
    from interleave_thinker.runtime.resume import reopen_if_failed

    out_dir = run_folder(out, prompt, resume)
    check_out_folder(out_dir)
    images = list(image or [])
    normalize_request_text(prompt, len(load_input_images(images)))  # fail fast, before loading any model
    cfg = settings.resolve()
    check_specs(cfg)  # an unknown kind or a missing checkpoint: one error line, before the loading display
    # SIGTERM unwinds like Ctrl-C: the trace is written and no temporary file is left behind.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with folder_lock(out_dir):
        if resume:
            reopen_if_failed(out_dir)
        with LoadingDisplay(console, f"loading models ({cfg.preset or 'custom'} preset)"):
            quiet_diffusers(cfg.generator)  # imports torch and diffusers: part of the time shown
            pipe = Pipeline.from_config(cfg)
        console.print(Text(f"templates: {pipe.templates.kind} ({pipe.templates.origin})"))
        with pipe, RichObserver.for_loop(console, cfg.loop) as observer:
            result = pipe(prompt, images=list(images), out_dir=out_dir, observer=observer, resume=resume)
        for line in repair_lines(result.trace):  # the sequence review and repairs, after the last step
            console.print(Text(f"  {line}"))
    if not result.ok:
        raise InterleaveThinkerError(f"{result.trace.error} (trace: {out_dir / 'trace.json'})")
    for warning in result.trace.warnings:
        console.print(Text.assemble(("warning:", "yellow"), " ", warning))
    counted = fallback_line(fallback_counts([result.trace]))
    if counted is not None:
        console.print(Text(counted))
    typer.echo(str(out_dir / "index.html"))


def redo(
    settings: SettingsFlags,
    parent: Path | None,
    step: int | None,
    instruction: str | None,
    prompt: str | None,
    out: Path | None,
    image: list[Path] | None,
) -> None:
    """``run --resume-from RUN --redo-step K``: the run in RUN again from step K, into a new folder."""
    from interleave_thinker.cli.progress import RichObserver
    from interleave_thinker.runtime.outlock import folder_lock
    from interleave_thinker.runtime.pipeline import Pipeline

    if parent is None or step is None:
        raise InputError("--resume-from RUN and --redo-step K go together (and --instruction with them).")
    if prompt is not None or image:
        raise InputError("--resume-from redoes that run's own request: give no request text or --image.")
    if not (parent / "trace.json").is_file():
        raise InputError(f"--resume-from {parent}: no trace.json there; give the folder of a run.")
    out_dir = run_folder(out, f"{parent.name} redo {step}", False)
    check_out_folder(out_dir)
    cfg = settings.resolve()
    seed = cfg.loop.seed_base if settings.values.get("seed") is not None else None
    with (
        folder_lock(out_dir),
        Pipeline.from_config(cfg) as pipe,
        RichObserver.for_loop(console, cfg.loop) as observer,
    ):
        result = pipe.redo(
            parent, step, out_dir=out_dir, instruction=instruction, seed=seed, observer=observer
        )
    if not result.ok:
        raise InterleaveThinkerError(f"{result.trace.error} (trace: {out_dir / 'trace.json'})")
    typer.echo(str(out_dir / "index.html"))


@prompts_app.command("download")
@with_settings()
def prompts_download(
    settings: SettingsFlags,
    force: Annotated[bool, typer.Option(help="Download again even when the cache is complete.")] = False,
    base_url: Annotated[str | None, typer.Option(help=field_help("prompts.base_url"))] = None,
) -> None:
    """Fetch the released templates at the pinned commit, verify their digests, and cache them."""
    store = settings.resolve(base_url=base_url).prompts.store()
    if not force and store.load_cache() is not None:
        typer.echo(f"cached and verified: {store.commit_cache}")
        return
    templates = store.download()
    typer.echo(f"downloaded and verified {len(templates.texts)} templates into {store.commit_cache}")


@prompts_app.command("check")
@with_settings()
def prompts_check(
    settings: SettingsFlags,
    folder: Annotated[
        Path | None,
        typer.Option(help=field_help("prompts.folder") + " \\[default: $INTERLEAVE_THINKER_PROMPTS]"),
    ] = None,
) -> None:
    """Show where each released template is found and whether its SHA-256 matches; exit 1 if any is not ok."""
    rows = settings.resolve(folder=folder).prompts.store().check()
    for name, where, status in rows:
        typer.echo(f"{name:18} {status:16} {where}")
    if any(status != "ok" for _, _, status in rows):
        raise typer.Exit(1)


def quiet_libraries() -> None:
    """Our own progress display replaces the libraries' per-file loading bars."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")


def print_error(message: str) -> None:
    """``error: MESSAGE`` on stderr; the message is literal text (a path or reply may hold ``[...]``),
    the credentials of any URL in it shown as ``***``."""
    console.print(Text.assemble(("error:", "red"), " ", redact_credentials(message)), soft_wrap=True)


def _redacted(record: logging.LogRecord) -> bool:
    """A log line as stderr shows it: the credentials of any URL in it as ``***``."""
    record.msg, record.args = redact_credentials(record.getMessage()), None
    return True


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_redacted)
    quiet_libraries()
    # Replies are read with ast.literal_eval; a model's "\d" must not print a SyntaxWarning on stderr
    # (a DeprecationWarning before Python 3.12).
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", message="invalid escape sequence")
    try:
        app()
    except USAGE_ERRORS as exc:
        print_error(str(exc))
        sys.exit(2)
    except StorageError as exc:
        print_error(str(exc))
        sys.exit(exc.exit_code)
    except InterleaveThinkerError as exc:
        print_error(str(exc))
        sys.exit(1)
    except KeyboardInterrupt:
        console.print(
            "[red]interrupted[/]: finished work is saved; run the same command again to continue "
            "(`run`: add --resume)."
        )
        sys.exit(130)
    except Exception as exc:  # not ours: one line, not a traceback (INTERLEAVE_THINKER_DEBUG=1 shows it)
        if os.environ.get("INTERLEAVE_THINKER_DEBUG"):
            raise
        from interleave_thinker.runtime.failures import failure_reason

        storage = storage_error(exc)  # a full disk, no permission, ...: the path and the fix
        print_error(str(storage) if storage is not None else failure_reason(exc))
        sys.exit(storage.exit_code if storage is not None else 1)
