"""``DemoRuns``: the handlers behind the demo's page (run, redo, stop, and the validators of run and redo).

Each streams the page's panes (:data:`Outputs`) as the run's events arrive; a refusal or a failure is a
one-line message in the status pane and a ``gr.Warning`` toast; each browser session has its own folder,
its own Stop and its own last run, the one "Redo a step" redoes.
"""

import html
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.runtime.documents import tiny_plan_line
from interleave_thinker.runtime.pipeline import Pipeline, load_input_images, normalize_request_text
from interleave_thinker.runtime.used_backends import backend_description
from interleave_thinker.ui.files import keep_fresh, new_run_dir, private_root, session_dir, sweep, zip_run
from interleave_thinker.ui.limits import UPLOAD_FIELD, check_prompt, check_uploads
from interleave_thinker.ui.live import RunView
from interleave_thinker.ui.options import DemoOptions, RunSettings, default_out_root
from interleave_thinker.ui.redo import INSTRUCTION_FIELD, SEED_FIELD, parent_trace, read_redo
from interleave_thinker.ui.render import render_final, render_live, render_plan, render_status
from interleave_thinker.ui.worker import EventSink, one_line, start_redo, start_run

Outputs = tuple[str, str, str, Any, list[tuple[str, str]], str, str | None]
"""Status, plan, live steps, the live steps' fold, the result gallery, the final page's text, the zip."""


def _outputs(view: RunView, download: str | None = None) -> Outputs:
    """Every pane for ``view``. Once the run has ended, the live steps fold away: their images are the
    gallery's, and the page shows each image once."""
    fold = gr.update(open=not view.finished)
    return (
        render_status(view),
        render_plan(view),
        render_live(view),
        fold,
        view.gallery(),
        render_final(view),
        download,
    )


def _toast(view: RunView) -> None:
    """The run's outcome as Gradio's own message too (a toast), besides the status line; escaped,
    because Gradio renders the message as HTML."""
    if view.phase == "refused" and view.error:
        gr.Warning(html.escape(view.error), title="Nothing was run")
    elif view.phase == "error" and view.error:
        gr.Warning(html.escape(view.error), title="The run stopped")
    if view.result is not None:
        for warning in view.result.trace.warnings:
            gr.Warning(html.escape(warning))


def _without_folders(message: str, files: list[str] | None) -> str:
    """The CLI's message with each upload named by its file name, not the server's temp folder."""
    for path in sorted(map(str, files or []), key=len, reverse=True):
        message = message.replace(path, Path(path).name)
    return message


class DemoRuns:
    """The handlers behind the page; one instance per app, state per browser session."""

    def __init__(self, pipeline: Pipeline, options: DemoOptions) -> None:
        self.pipeline, self.options = pipeline, options
        self._cancels: dict[str, threading.Event] = {}
        self._parents: dict[str, tuple[Path, PipelineConfig]] = {}
        """Each session's last run with a trace (the one "Redo a step" redoes) and its settings."""
        self._lock = threading.Lock()

    def _uploads(self, files: list[str] | None) -> list[str]:
        """The uploads' count, bytes and header pixels, checked without decoding any of them."""
        opts = self.options
        return check_uploads(
            files,
            max_bytes=opts.max_upload_bytes,
            max_images=opts.max_images,
            max_pixels=opts.max_upload_pixels,
        )

    def check(self, text: str, files: list[str] | None, *settings: Any) -> list[dict[str, Any]]:
        """Gradio's validator of ``run``: called when the request arrives, before it is queued, so a
        refused request never waits for (nor holds) a run slot. One ``gr.validate`` per input."""
        verdicts = [gr.validate(True, "") for _ in range(2 + len(settings))]
        for index, check in (
            (0, lambda: check_prompt(text or "", self.options.max_prompt_chars)),
            (1, lambda: self._uploads(files)),
        ):
            try:
                check()
            except InterleaveThinkerError as exc:
                verdicts[index] = gr.validate(False, _without_folders(one_line(str(exc)), files))
        return verdicts

    def run(
        self,
        text: str,
        files: list[str] | None,
        max_attempts: float,
        seed: float,
        text_steps: str,
        critic_on_last_attempt: bool,
        size: str,
        request: gr.Request,
    ) -> Iterator[Outputs]:
        """Stream one run: status, plan, live steps, the result gallery, the final page and (at the
        end) the zip; a refusal or a failure is a ``gr.Warning`` toast too."""
        view = self._view()
        opts = self.options
        try:  # 1. The bounds, then the same checks and one-line messages as the CLI
            check_prompt(text or "", opts.max_prompt_chars)
            paths = self._uploads(files)
            images = load_input_images(paths)
            normalize_request_text(text or "", len(images), images_from=UPLOAD_FIELD)
            settings = RunSettings(
                int(max_attempts), int(seed), text_steps, bool(critic_on_last_attempt), size
            )
            config = settings.apply(self.pipeline.config)
        except InterleaveThinkerError as exc:
            view.phase, view.error = "refused", _without_folders(one_line(str(exc)), files)
            _toast(view)
            yield _outputs(view)
            return
        private_root(opts.out_root, default=opts.out_root == default_out_root())
        # 2. A fresh folder in this session's own space; old runs of every session are swept
        sweep(opts.out_root, opts.ttl_s)
        session = self._session(request)
        view.run_dir = run_dir = new_run_dir(session, text)
        view.phase = "planning"
        # 3. Stream every event; the last one ends the run
        sink = start_run(self.pipeline, config, text, paths, run_dir)
        yield from self._stream(view, session, config, sink)

    def check_redo(
        self, step: float | None, instruction: str | None, seed: float | None, request: gr.Request
    ) -> list[dict[str, Any]]:
        """Gradio's validator of ``redo``, as :meth:`check` is of ``run``: each field's bound, and the
        step against this session's last run, painted on the field at fault before anything is queued."""
        verdicts = [gr.validate(True, "") for _ in range(3)]
        try:
            wanted = read_redo(step, instruction, seed)
            parent_trace(self._parent(request)[0], wanted.step)
        except InterleaveThinkerError as exc:
            message = one_line(str(exc))
            field = 1 if message.startswith(INSTRUCTION_FIELD) else 2 if message.startswith(SEED_FIELD) else 0
            verdicts[field] = gr.validate(False, message)
        return verdicts

    def redo(
        self, step: float | None, instruction: str | None, seed: float | None, request: gr.Request
    ) -> Iterator[Outputs]:
        """This session's last run again from ``step`` (``Pipeline.redo``: the steps before it copied byte
        for byte, with no call), optionally with a new instruction and seed base for that step on;
        streamed like a run into a new folder whose trace names the parent. A refusal leaves the panes
        of the last run as they are, with the message in the status line and a toast."""
        view = self._view()
        opts = self.options
        parent, config = self._parent(request)
        if parent is not None:  # no session's sweep removes it mid-redo (an expired one is swept below)
            keep_fresh(parent, opts.ttl_s)
        sweep(opts.out_root, opts.ttl_s)
        try:
            wanted = read_redo(step, instruction, seed)
            trace = parent_trace(parent, wanted.step)
        except InterleaveThinkerError as exc:
            view.phase, view.error = "refused", one_line(str(exc))
            _toast(view)
            yield (render_status(view), *(gr.skip(),) * 6)  # gr.skip(): the last run stays shown
            return
        assert parent is not None and config is not None  # parent_trace refuses a missing one
        if wanted.seed is not None:  # the settings the redo runs with, so a redo of it keeps its seed
            config = config.model_copy(deep=True)
            config.loop.seed_base = wanted.seed
        session = self._session(request)
        view.keep_steps(trace, wanted.step)
        view.run_dir = run_dir = new_run_dir(session, f"redo {wanted.step} {trace.request.text}")
        view.phase = "running"
        sink = start_redo(self.pipeline, config, parent, wanted, run_dir)
        yield from self._stream(view, session, config, sink)

    def _view(self) -> RunView:
        planner = backend_description(self.pipeline.planner_backend)
        return RunView(notice=self.pipeline.config.notice, tiny_plan=tiny_plan_line(planner))

    def _stream(
        self, view: RunView, session: Path, config: PipelineConfig, sink: EventSink
    ) -> Iterator[Outputs]:
        """Every event of the run in ``view.run_dir`` until the last; then its zip, and the run becomes
        the session's to redo. Stop (or the visitor leaving) cancels it before its next model call."""
        run_dir = view.run_dir
        assert run_dir is not None
        with self._lock:
            self._cancels[session.name] = sink.cancel
        try:
            yield _outputs(view)
            for event in sink.drain():
                view.apply(event)
                if event.kind not in ("done", "cancelled", "error"):
                    yield _outputs(view)
            download = None
            if (run_dir / "trace.json").is_file():
                download = str(zip_run(run_dir))
                with self._lock:
                    self._parents = {k: v for k, v in self._parents.items() if v[0].is_dir()}
                    self._parents[session.name] = (run_dir, config)
            _toast(view)
            yield _outputs(view, download)
        finally:
            sink.cancel.set()  # the visitor left mid-run: the worker stops before its next model call
            with self._lock:
                if self._cancels.get(session.name) is sink.cancel:
                    del self._cancels[session.name]

    def _session(self, request: gr.Request) -> Path:
        return session_dir(self.options.out_root, getattr(request, "session_hash", None))

    def _parent(self, request: gr.Request) -> tuple[Path | None, PipelineConfig | None]:
        """The session's last run that left a trace, and the settings it ran with (a redo keeps them)."""
        with self._lock:
            return self._parents.get(self._session(request).name, (None, None))

    def cancel(self, request: gr.Request) -> None:
        """Stop this session's run before its next model call (other sessions are untouched)."""
        key = self._session(request).name
        with self._lock:
            event = self._cancels.get(key)
        if event is not None:
            event.set()
