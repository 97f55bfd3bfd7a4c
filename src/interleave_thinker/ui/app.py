"""``build_demo(...) -> gr.Blocks``: the streaming web demo, for the CLI, a Space's app.py and tests."""

import hashlib
import html
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from interleave_thinker.agents.messages import IMAGE_MARKER
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InterleaveThinkerError
from interleave_thinker.runtime.documents import tiny_plan_line
from interleave_thinker.runtime.pipeline import Pipeline, load_input_images, normalize_request_text
from interleave_thinker.runtime.used_backends import backend_description
from interleave_thinker.ui.files import (
    example_images,
    new_run_dir,
    private_root,
    session_dir,
    sweep,
    zip_run,
)
from interleave_thinker.ui.limits import UPLOAD_FIELD, check_prompt, check_uploads
from interleave_thinker.ui.live import RunView
from interleave_thinker.ui.options import (
    MAX_ATTEMPTS_LIMIT,
    DemoOptions,
    RunSettings,
    default_out_root,
    size_choices,
)
from interleave_thinker.ui.render import render_final, render_live, render_plan, render_status
from interleave_thinker.ui.worker import one_line, start_run

Outputs = tuple[str, str, str, Any, list[tuple[str, str]], str, str | None]
"""Status, plan, live steps, the live steps' fold, the result gallery, the final page's text, the zip."""

INTRO = """# interleave-thinker
A **planner** turns your request into image steps; for every step a generator makes an image and a
**critic** checks it, refining the prompt until the step is right. Watch the plan, every attempt and the
critic's reasoning as they happen. With input images, mark where each belongs with `<image>` (with no
marker they are placed before the text)."""


LIVE_LABEL = "Steps as they run: every attempt and the critic's notes"


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


EXAMPLE_IMAGES_REMOVED = (
    "The example's images were removed: this request has no `<image>` marker. Upload images to use some."
)


class ExampleImages:
    """The examples' image files, known by size and content digest. A file in the upload field is
    an example's when its bytes are, so no per-session state set by the example's click is needed:
    that event may land after the visitor's first keys (a busy server), and the images then rode along."""

    def __init__(self, paths: list[Path]) -> None:
        self._digests: dict[int, set[str]] = {}
        for path in paths:
            self._digests.setdefault(path.stat().st_size, set()).add(_sha256(path))

    def hold(self, files: list[str] | None) -> bool:
        """Whether the field holds images and every one of them is an example's."""
        if not files:
            return False
        for name in files:
            path = Path(name)
            try:
                size = path.stat().st_size
            except OSError:
                return False
            if size not in self._digests or _sha256(path) not in self._digests[size]:
                return False  # only a file of an example's size is read at all
        return True


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def keep_example_images(text: str, files: list[str] | None, examples: ExampleImages) -> tuple[Any, Any]:
    """The upload field and its note after the visitor typed: an example's images stay while the
    request still has an ``<image>`` marker (the visitor is editing the example), and are cleared
    once it has none (a new request), with a note saying so. Images the visitor uploaded are never
    touched (unless they are byte for byte an example's)."""
    if not examples.hold(files) or IMAGE_MARKER.search(text or ""):
        return gr.skip(), gr.skip()
    return None, gr.update(value=EXAMPLE_IMAGES_REMOVED, visible=True)


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
        planner = backend_description(self.pipeline.planner_backend)
        view = RunView(notice=self.pipeline.config.notice, tiny_plan=tiny_plan_line(planner))
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
        session = session_dir(opts.out_root, getattr(request, "session_hash", None))
        run_dir = new_run_dir(session, text)
        view.run_dir = run_dir
        sink = start_run(self.pipeline, config, text, paths, run_dir)
        with self._lock:
            self._cancels[session.name] = sink.cancel
        view.phase = "planning"
        try:  # 3. Stream every event; the last one ends the run
            yield _outputs(view)
            for event in sink.drain():
                view.apply(event)
                if event.kind not in ("done", "cancelled", "error"):
                    yield _outputs(view)
            download = str(zip_run(run_dir)) if (run_dir / "trace.json").is_file() else None
            _toast(view)
            yield _outputs(view, download)
        finally:
            sink.cancel.set()  # the visitor left mid-run: the worker stops before its next model call
            with self._lock:
                if self._cancels.get(session.name) is sink.cancel:
                    del self._cancels[session.name]

    def cancel(self, request: gr.Request) -> None:
        """Stop this session's run before its next model call (other sessions are untouched)."""
        key = session_dir(self.options.out_root, getattr(request, "session_hash", None)).name
        with self._lock:
            event = self._cancels.get(key)
        if event is not None:
            event.set()


def _load(source: Pipeline | PipelineConfig | str) -> Pipeline:
    if isinstance(source, Pipeline):
        return source
    if isinstance(source, PipelineConfig):
        return Pipeline.from_config(source)
    return Pipeline.from_preset(source)


def _examples(root: Path) -> list[list[Any]]:
    frames = [str(p) for p in example_images(root)]
    return [
        ["How to make a paper crane? Show each fold.", None],
        [
            "<image><image> The ball rolls towards the box. What happens next? Show the next two moments.",
            frames,
        ],
        ["<image><image> Which picture shows the ball closer to the box, and why?", frames],
    ]


def build_demo(
    source: Pipeline | PipelineConfig | str = "tiny", *, options: DemoOptions | None = None
) -> gr.Blocks:
    """The demo app over a pipeline (or a config, or a preset name), queued with a concurrency limit."""
    opts = options or DemoOptions()
    pipeline = _load(source)
    runs = DemoRuns(pipeline, opts)
    private_root(opts.out_root, default=opts.out_root == default_out_root())
    cfg = pipeline.config
    with gr.Blocks(title="interleave-thinker", delete_cache=(int(opts.ttl_s), int(opts.ttl_s))) as demo:
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=2):
                text = gr.Textbox(
                    label="Request",
                    lines=3,
                    placeholder="How to draw a cat step by step?",
                    max_length=opts.max_prompt_chars,
                    elem_id="it-request",
                )
                files, note = _upload_field()
                settings = _advanced_settings(cfg)
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="it-run")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="it-stop")
                examples = gr.Examples(
                    _examples(opts.out_root),
                    inputs=[text, files],
                    cache_examples=False,
                    elem_id="it-examples",
                )
            with gr.Column(scale=3, min_width=0):
                outputs = _result_panes(RunView(notice=cfg.notice))
        known = ExampleImages(example_images(opts.out_root))
        _example_images_stay_with_their_example(examples, known, text, files, note)
        run_button.click(
            runs.run,
            inputs=[text, files, *settings],
            outputs=outputs,
            api_name="run",
            validator=runs.check,
            concurrency_limit=opts.concurrency,
            concurrency_id="pipeline",
        )
        stop_button.click(runs.cancel, inputs=None, outputs=None, api_name="cancel", queue=False)
    demo.queue(max_size=opts.queue_size, default_concurrency_limit=opts.concurrency)
    return demo


def _upload_field() -> tuple[Any, Any]:
    """The upload field and, under it, the note :func:`keep_example_images` shows."""
    files = gr.File(
        label="Input images (optional, in order)",
        file_count="multiple",
        file_types=["image"],
        elem_id="it-files",
    )
    return files, gr.Markdown(visible=False, elem_id="it-files-note")


def _example_images_stay_with_their_example(
    examples: Any, known: ExampleImages, text: Any, files: Any, note: Any
) -> None:
    """Let :func:`keep_example_images` clear an example's images when the visitor types a request
    without a marker, and hide its note when an example is clicked again. Both run outside the queue:
    typing never waits behind runs, nor is refused when the queue is full."""
    examples.load_input_event.then(lambda: gr.update(visible=False), outputs=[note], queue=False)

    def on_input(typed: str, current: list[str] | None) -> tuple[Any, Any]:
        return keep_example_images(typed, current, known)

    text.input(on_input, inputs=[text, files], outputs=[files, note], queue=False, show_progress="hidden")


def _advanced_settings(cfg: PipelineConfig) -> list[Any]:
    """The folded settings, in the order ``DemoRuns.run`` takes them: attempts, seed, answer steps,
    critic on the last attempt, size."""
    with gr.Accordion("Advanced settings", open=False):
        attempts = gr.Slider(
            1,
            MAX_ATTEMPTS_LIMIT,
            value=cfg.loop.max_attempts,
            step=1,
            label="Max attempts per step",
        )
        seed = gr.Number(value=cfg.loop.seed_base, precision=0, label="Seed base")
        text_steps = gr.Radio(
            ["text", "generate"],
            value=cfg.loop.text_steps,
            label="Answer steps (Task A): text, or generate an image",
        )
        critic_last = gr.Checkbox(
            value=cfg.loop.critic_on_last_attempt,
            label="Ask the critic about the last attempt too",
        )
        size_list = size_choices(cfg.generation.width, cfg.generation.height)
        size = gr.Dropdown(size_list, value=size_list[0], label="Image size (WIDTHxHEIGHT)")
    return [attempts, seed, text_steps, critic_last, size]


def _result_panes(idle: RunView) -> list[Any]:
    """Status, plan, live attempts (and their fold), the result gallery, the final page's text and
    the zip download, in :data:`Outputs`' order."""
    status = gr.HTML(render_status(idle), elem_id="it-status")
    plan = gr.HTML(elem_id="it-plan")
    with gr.Accordion(LIVE_LABEL, open=True, elem_id="it-live-fold") as fold:
        live = gr.HTML(elem_id="it-live")
    gallery = gr.Gallery(
        label="Result: the input images, then each step's accepted image",
        elem_id="it-gallery",
        columns=3,
        height="auto",
        object_fit="contain",
        interactive=False,
        buttons=["download", "download_all", "fullscreen"],
        format="png",
        min_width=0,
    )
    final = gr.HTML(elem_id="it-final")
    download = gr.File(label="Run folder (zip)", elem_id="it-download", interactive=False)
    return [status, plan, live, fold, gallery, final, download]


def launch_kwargs(options: DemoOptions) -> dict[str, Any]:
    """What ``launch`` needs besides host and port: served folders and Gradio's own upload bound."""
    return {
        "allowed_paths": [str(options.out_root)],
        "max_file_size": options.max_upload_bytes,
    }
