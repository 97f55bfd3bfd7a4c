"""``build_demo(...) -> gr.Blocks``: the streaming web demo, for the CLI, a Space's app.py and tests."""

import hashlib
from pathlib import Path
from typing import Any

import gradio as gr

from interleave_thinker.agents.messages import IMAGE_MARKER
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.runtime.pipeline import Pipeline
from interleave_thinker.ui.files import example_images, private_root
from interleave_thinker.ui.live import RunView
from interleave_thinker.ui.options import MAX_ATTEMPTS_LIMIT, DemoOptions, default_out_root, size_choices
from interleave_thinker.ui.redo import MAX_INSTRUCTION_CHARS
from interleave_thinker.ui.render import render_status
from interleave_thinker.ui.runs import DemoRuns

INTRO = """# interleave-thinker
A **planner** turns your request into image steps; for every step a generator makes an image and a
**critic** checks it, refining the prompt until the step is right. Watch the plan, every attempt and the
critic's reasoning as they happen. With input images, mark where each belongs with `<image>` (with no
marker they are placed before the text)."""


LIVE_LABEL = "Steps as they run: every attempt and the critic's notes"


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
                redo_fields, redo_button = _redo_fields()
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
        redo_button.click(
            runs.redo,
            inputs=redo_fields,
            outputs=outputs,
            api_name="redo",
            validator=runs.check_redo,
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


def _redo_fields() -> tuple[list[Any], Any]:
    """The folded "Redo a step" fields, in the order ``DemoRuns.redo`` takes them (step, instruction,
    seed), and its button."""
    with gr.Accordion("Redo a step of the last run", open=False, elem_id="it-redo-fold"):
        gr.Markdown(
            "Make one step again: the steps before it are kept as they are (no model call), that step "
            "and the ones after it are generated again, into a new run that names the last one as its parent."
        )
        step = gr.Number(value=1, precision=0, label="Redo from step", elem_id="it-redo-step")
        instruction = gr.Textbox(
            label="New instruction for that step (optional; empty keeps the plan's)",
            lines=2,
            max_length=MAX_INSTRUCTION_CHARS,
            elem_id="it-redo-instruction",
        )
        seed = gr.Number(
            value=None,
            precision=0,
            label="Seed base from that step on (optional; empty keeps the run's)",
            elem_id="it-redo-seed",
        )
        button = gr.Button("Redo from this step", elem_id="it-redo")
    return [step, instruction, seed], button


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
