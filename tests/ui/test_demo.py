"""The web demo's handlers, driven with scripted backends: streaming order, errors, cancel, sessions, files."""

from __future__ import annotations

import html
import json
import os
import re
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr
import markupsafe
import pytest
from PIL import Image

from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.runtime.documents import TINY_PLAN
from interleave_thinker.runtime.pipeline import load_input_images, normalize_request_text
from interleave_thinker.testing.scripted import ScriptedImageBackend
from interleave_thinker.ui.app import EXAMPLE_IMAGES_REMOVED, ExampleImages, keep_example_images
from interleave_thinker.ui.files import example_images, keep_fresh, new_run_dir, session_dir, sweep, zip_run
from interleave_thinker.ui.limits import check_uploads
from interleave_thinker.ui.options import DemoOptions, RunSettings, default_out_root, parse_size
from interleave_thinker.ui.redo import NO_RUN
from interleave_thinker.ui.runs import DemoRuns
from tests.helpers.demo import BOMB_MESSAGE, NOTICE, GatedImage, bomb_png, scripted_pipeline

# gr.Warning outside a served app is warnings.warn: the toasts are asserted in their own tests
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:gradio.helpers")


def session(name: str) -> Any:
    return SimpleNamespace(session_hash=name)


def run_args(
    text: str, files: list[str] | None = None, size: str = "96x80"
) -> tuple[str, list[str] | None, int, int, str, bool, str]:
    return (text, files, 3, 0, "text", False, size)


def first_index(frames: list[tuple[Any, ...]], needle: str, column: int) -> int:
    return next(i for i, frame in enumerate(frames) if needle in frame[column])


@pytest.fixture
def options(tmp_path: Path) -> DemoOptions:
    return DemoOptions(out_root=tmp_path / "demo", ttl_s=3600, max_upload_mb=0.05, max_images=3)


def test_stream_shows_plan_attempts_verdicts_then_page_and_zip(options: DemoOptions) -> None:
    runs = DemoRuns(scripted_pipeline(), options)
    frames = list(runs.run(*run_args("Please draw a Cat"), request=session("s1")))
    status, plan, live, _, _, final, download = frames[-1]
    assert NOTICE in frames[0][0] and "phase-planning" in frames[0][0]
    assert 'data-ev="plan"' in plan and "Cat sketch" in plan and "Cat colour" in plan

    plan_at = first_index(frames, 'data-ev="plan"', 1)
    image_at = first_index(frames, 'data-ev="image-1-0"', 2)
    verdict_at = first_index(frames, 'data-ev="verdict-1-0"', 2)
    refine_at = first_index(frames, 'data-ev="refine-1-0"', 2)
    retry_at = first_index(frames, 'data-ev="image-1-1"', 2)
    final_at = first_index(frames, 'data-ev="final"', 5)
    # each appears in its own update, in the loop's order, and all before the final page
    assert plan_at < image_at < verdict_at <= refine_at < retry_at < final_at == len(frames) - 1
    assert "the critic is checking this image" in frames[verdict_at - 1][2]
    assert "refined: try again" in live and "the colour is wrong &lt;b&gt;here&lt;/b&gt;" in live
    assert "accepted by the critic" in live and 'data-ev="verdict-2-1"' in live
    assert final.count('data-role="picture"') == 2 and "phase-done" in status
    assert all(frame[6] is None for frame in frames[:-1])

    assert download is not None
    archive = zipfile.ZipFile(download)
    names = set(archive.namelist())
    assert {"trace.json", "document.md", "index.html"} <= names
    assert {"images/step01_attempt0.png", "images/step01_attempt1.png", "images/step02_attempt1.png"} <= names
    trace = json.loads(archive.read("trace.json"))
    assert trace["status"] == "succeeded" and trace["request"]["text"] == "Please draw a Cat"
    assert [s["accepted_image"] for s in trace["steps"]] == ["step01_attempt1.png", "step02_attempt1.png"]


def test_model_text_is_escaped(options: DemoOptions) -> None:
    runs = DemoRuns(scripted_pipeline(), options)
    frames = list(runs.run(*run_args("EVIL request"), request=session("s1")))
    page = "".join(frames[-1][:3]) + frames[-1][5]
    assert "<script>" not in page and "${x}" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#36;&#123;x&#125;" in frames[-1][1]


def cli_message(text: str, paths: list[str]) -> str:
    with pytest.raises(InputError) as caught:
        normalize_request_text(text, len(load_input_images(paths)))
    return str(caught.value)


@pytest.mark.parametrize("case", ["empty", "mismatch", "unreadable"])
def test_bad_input_shows_the_cli_message(options: DemoOptions, tmp_path: Path, case: str) -> None:
    """The CLI's message, naming the page's upload field where the CLI names its --image flag, under
    a status that says nothing was run (not "The run stopped.": none started)."""
    good = tmp_path / "good.png"
    Image.new("RGB", (8, 8), "red").save(good)
    bad = tmp_path / "bad.png"
    bad.write_text("not a png")
    text, files = {
        "empty": ("   ", []),
        "mismatch": ("<image> next", [str(good), str(good)]),
        "unreadable": ("<image> next", [str(bad)]),
    }[case]
    runs = DemoRuns(scripted_pipeline(), options)
    frames = list(runs.run(*run_args(text, files), request=session("s1")))
    assert len(frames) == 1
    status = frames[0][0]
    expected = cli_message(text, files).replace(str(tmp_path) + "/", "")  # uploads shown by file name
    expected = expected.replace("(--image)", "(the Input images field)")
    assert f"error: {expected}</p>" in html.unescape(status) and str(tmp_path) not in status
    assert "--image" not in status and 'data-ev="phase-refused"' in status
    assert "Nothing was run: change the request and press Run again." in status
    assert "The run stopped." not in status
    assert "Traceback" not in status and frames[0][1:3] == ("", "") and frames[0][4:] == ([], "", None)
    assert not options.out_root.exists()  # nothing written for bad input


def test_upload_limits_and_settings(options: DemoOptions, tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    Image.effect_noise((256, 256), 80).convert("RGB").save(big)  # ~ 60 kB > 0.05 MB
    runs = DemoRuns(scripted_pipeline(), options)
    status = next(iter(runs.run(*run_args("<image> next", [str(big)]), request=session("s1"))))[0]
    assert "error: Upload big.png is 0.1" in status and "the limit is 0.05 MB per image" in status
    status = next(iter(runs.run(*run_args("<image>" * 4, [str(big)] * 4), request=session("s1"))))[0]
    assert "4 images were uploaded; this demo takes at most 3." in status
    status = next(iter(runs.run(*run_args("Draw a Cat", size="100x100"), request=session("s1"))))[0]
    assert "error: Image size &#x27;100x100&#x27;" in status

    cfg = RunSettings(2, 7, "generate", True, "512x256").apply(scripted_pipeline().config)
    assert (cfg.loop.max_attempts, cfg.loop.seed_base, cfg.loop.text_steps) == (2, 7, "generate")
    assert cfg.loop.critic_on_last_attempt and (cfg.generation.width, cfg.generation.height) == (512, 256)
    with pytest.raises(ConfigError, match="text_steps"):
        RunSettings(2, 7, "poem", True, "512x256").apply(scripted_pipeline().config)
    assert parse_size("64x64") == (64, 64)


def test_cancel_stops_before_the_next_model_call(options: DemoOptions) -> None:
    generator = GatedImage()
    runs = DemoRuns(scripted_pipeline(generator), options)
    frames: Iterator[tuple[Any, ...]] = runs.run(*run_args("Draw a Cat"), request=session("s1"))
    seen = []
    for frame in frames:
        seen.append(frame)
        if 'data-ev="attempt-1-0"' in frame[2]:
            break
    assert generator.entered.acquire(timeout=30)  # the first image is being generated
    runs.cancel(session("other"))  # another session's Stop does nothing here
    runs.cancel(session("s1"))
    generator.release.release()
    seen += list(frames)
    status, _, live, _, _, final, download = seen[-1]
    assert "phase-cancelled" in status and final == ""
    assert len(generator.calls) == 1 and 'data-ev="verdict-1-0"' not in live
    # issue 33 item 7: the cancelled attempt no longer says "generating…"
    assert "generating…" not in live and "checking this image" not in live
    assert 'data-ev="unfinished-1-0">stopped: Stop was pressed before this attempt finished.</p>' in live
    trace = json.loads(zipfile.ZipFile(download).read("trace.json"))
    assert trace["status"] == "running" and trace["planner"]["plan"] is not None


def test_sessions_get_their_own_folders(options: DemoOptions) -> None:
    runs = DemoRuns(scripted_pipeline(), options)
    results: dict[str, tuple[Any, ...]] = {}

    def visit(name: str, text: str) -> None:
        results[name] = list(runs.run(*run_args(text), request=session(name)))[-1]

    threads = [
        threading.Thread(target=visit, args=("alpha", "Paint a Fox")),
        threading.Thread(target=visit, args=("beta", "Paint a Whale")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for name, mine, theirs in (("alpha", "Fox", "Whale"), ("beta", "Whale", "Fox")):
        _, plan, live, _, _, final, download = results[name]
        assert mine in plan and theirs not in plan + live + final
        assert Path(download).parent == options.out_root / name
        trace = json.loads(zipfile.ZipFile(download).read("trace.json"))
        assert trace["request"]["text"] == f"Paint a {mine}"


def test_sweep_removes_only_expired_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    old = new_run_dir(session_dir(root, "old-session!"), "x")
    fresh = new_run_dir(session_dir(root, "new"), "y")
    for folder in (old, fresh):
        (folder / "images").mkdir(parents=True)
        (folder / "trace.json").write_text("{}")
    old_zip = zip_run(old)
    assert zipfile.ZipFile(old_zip).namelist() == ["trace.json"]
    past = time.time() - 7200
    for path in (old, old_zip):
        os.utime(path, (past, past))
    removed = sweep(root, 3600)
    assert set(removed) == {old, old_zip, old.parent} and old.parent.name == "oldsession"
    assert fresh.is_dir() and not old.parent.exists()


def test_a_run_being_redone_is_kept_fresh_and_an_expired_one_is_not(tmp_path: Path) -> None:
    """A redo touches its parent before any sweep, so another session's sweep cannot remove it mid-copy."""
    root = tmp_path / "root"
    nearly, expired = (new_run_dir(session_dir(root, name), "x") for name in ("a", "b"))
    for folder, age in ((nearly, 3500), (expired, 3700)):
        folder.mkdir(parents=True)
        os.utime(folder, (time.time() - age, time.time() - age))
    keep_fresh(nearly, 3600)
    keep_fresh(expired, 3600)
    keep_fresh(root / "gone", 3600)  # a missing folder is no error: the redo refuses it
    assert time.time() - nearly.stat().st_mtime < 60
    assert sweep(root, 3600) == [expired, expired.parent] and nearly.is_dir()


class BrokenImage(ScriptedImageBackend):
    def generate(self, request: ImageRequest) -> Image.Image:
        raise RuntimeError("CUDA exploded\nTraceback (most recent call last): secret detail")


def test_unexpected_failure_is_one_line_without_traceback(options: DemoOptions) -> None:
    runs = DemoRuns(scripted_pipeline(BrokenImage()), options)
    frames = list(runs.run(*run_args("Please draw a Cat"), request=session("s1")))
    status = frames[-1][0]
    assert "error: internal error (RuntimeError); the server log has the details." in status
    assert "Traceback" not in status and "secret detail" not in status and "phase-error" in status
    assert 'data-ev="plan"' in frames[-1][1]  # what was shown before the failure stays
    assert "generating…" not in frames[-1][2] and "not finished: the run stopped." in frames[-1][2]


@pytest.mark.parametrize(
    ("side", "what"),
    [
        (11000, "is 11000x11000 = 121000000 pixels, over the limit of 16777216"),
        (20000, "is a decompression bomb (its header declares too many pixels)"),
    ],
    ids=["121-megapixels", "over-pillows-own-limit"],
)
def test_pixel_bombs_are_refused_from_their_header(tmp_path: Path, side: int, what: str) -> None:
    """Issue 30 item 9: a 121-megapixel upload was decoded (1.5 GB, 30 s); a larger one escaped as
    Pillow's DecompressionBombError, shown as Gradio's generic error. Both get the one line, unread."""
    bomb = bomb_png(tmp_path / "bomb.png", side)
    assert bomb.stat().st_size < 100_000
    options = DemoOptions(out_root=tmp_path / "demo")
    runs = DemoRuns(scripted_pipeline(), options)
    expected = BOMB_MESSAGE.format(name="bomb.png", what=what)
    started = time.monotonic()
    frames = list(runs.run(*run_args("<image> next", [str(bomb)]), request=session("s1")))
    assert len(frames) == 1 and f"error: {expected}</p>" in frames[0][0]
    assert 'data-ev="phase-refused"' in frames[0][0] and str(tmp_path) not in frames[0][0]
    verdicts = runs.check("<image> next", [str(bomb)], 3, 0, "text", False, "96x80")
    assert verdicts[1] == {"__type__": "validate", "is_valid": False, "message": expected}
    assert all(v["is_valid"] for i, v in enumerate(verdicts) if i != 1) and len(verdicts) == 7
    assert time.monotonic() - started < 2  # the bound; a decode of the 121 MP one takes more
    assert not options.out_root.exists()
    small = tmp_path / "small.png"
    Image.new("RGB", (4096, 4096), "red").save(small)
    assert check_uploads([str(small)], max_bytes=2**30, max_images=1, max_pixels=4096**2) == [str(small)]


def test_long_requests_are_refused_before_anything_runs(tmp_path: Path) -> None:
    """Issue 30 item 9: a 1 MB request held the only slot for minutes; now it is refused at once."""
    options = DemoOptions(out_root=tmp_path / "demo", max_prompt_chars=4000)
    runs = DemoRuns(scripted_pipeline(), options)
    expected = "The request is 1,048,576 characters long; this demo takes at most 4,000. Shorten it."
    text = "draw " * (2**20 // 5) + "x" * (2**20 % 5)
    frames = list(runs.run(*run_args(text), request=session("s1")))
    assert len(frames) == 1 and f"error: {expected}</p>" in frames[0][0]
    verdicts = runs.check(text, None, 3, 0, "text", False, "96x80")
    assert verdicts[0] == {"__type__": "validate", "is_valid": False, "message": expected}
    assert runs.check("x" * 4000, None, 3, 0, "text", False, "96x80")[0]["is_valid"]
    assert not options.out_root.exists()


def test_sweep_never_follows_nor_deletes_through_links(tmp_path: Path) -> None:
    """Issue 30 item 14: a link in the output root made ``rmtree`` raise on every run, and a session
    folder linked elsewhere had its target's old files deleted. Links are skipped and left alone."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "old-run").mkdir(parents=True)
    (outside / "old-run" / "keep.txt").write_text("not the demo's")
    (outside / "keep.txt").write_text("not the demo's")
    folder = session_dir(root, "s1")
    old = new_run_dir(folder, "old")
    old.mkdir(parents=True)
    (old / "trace.json").write_text("{}")
    (old / "escape").symlink_to(outside)  # a link inside a run folder: rmtree unlinks it, only it
    (folder / "linked-run").symlink_to(outside / "old-run")
    (folder / "linked-file").symlink_to(outside / "keep.txt")
    (folder / "dangling").symlink_to(tmp_path / "nothing")
    (root / "linked-session").symlink_to(outside)
    past = time.time() - 7200
    for path in (outside, outside / "old-run", outside / "keep.txt", old):
        os.utime(path, (past, past))
    for link in ("linked-run", "linked-file", "dangling"):
        os.utime(folder / link, (past, past), follow_symlinks=False)
    assert zipfile.ZipFile(zip_run(old)).namelist() == ["trace.json"]  # the link's files are not zipped
    os.utime(old.with_name(old.name + ".zip"), (past, past))

    removed = sweep(root, 3600)
    assert set(removed) == {old, old.with_name(old.name + ".zip")}
    assert (outside / "old-run" / "keep.txt").read_text() == "not the demo's"
    assert (outside / "keep.txt").read_text() == "not the demo's"
    assert {p.name for p in folder.iterdir()} == {"linked-run", "linked-file", "dangling"}
    assert (root / "linked-session").is_symlink()

    runs = DemoRuns(scripted_pipeline(), DemoOptions(out_root=root, ttl_s=3600))
    status, *_, download = list(runs.run(*run_args("Please draw a Cat"), request=session("s2")))[-1]
    assert download is not None
    assert "phase-done" in status and Path(download).parent == root / "s2"


def test_default_output_root_is_private_and_not_shared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 30 item 14: the default root was the system temp folder, shared by every account."""
    from interleave_thinker.cli import demo as demo_cli
    from interleave_thinker.ui import build_demo

    monkeypatch.setenv("INTERLEAVE_THINKER_HOME", str(tmp_path / "home"))
    root = default_out_root()
    assert root == tmp_path / "home" / "demo" and DemoOptions().out_root == root
    root.mkdir(parents=True, mode=0o755)
    root.chmod(0o755)
    build_demo(scripted_pipeline())
    assert root.stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("INTERLEAVE_THINKER_HOME")
    assert default_out_root() == Path.home() / ".cache" / "interleave-thinker" / "demo"
    assert DemoOptions().max_upload_pixels == demo_cli.DEFAULT_MAX_PIXELS
    assert DemoOptions().max_prompt_chars == demo_cli.DEFAULT_MAX_PROMPT_CHARS


def test_an_output_root_of_another_user_is_refused(tmp_path: Path) -> None:
    """Issue 30 item 14: a root someone else made (the old shared default could be planted) is not
    written into; the one line names the folder and the flag."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    root = tmp_path / "planted"
    root.mkdir()
    os.chown(root, 4242, 4242)
    with pytest.raises(
        ConfigError,
        match=r"planted belongs to another user \(uid 4242\); give a folder of your own with --out-root\.",
    ):
        DemoRuns(scripted_pipeline(), DemoOptions(out_root=root)).run(
            *run_args("Draw a Cat"), request=session("s1")
        ).__next__()
    assert list(root.iterdir()) == []


def test_attempts_are_numbered_as_their_files(options: DemoOptions) -> None:
    """Issue 33 item 7: the page said "attempt 1" beside ``step01_attempt0.png``. Attempts count from 0
    everywhere the visitor sees them, and each names its file."""
    runs = DemoRuns(scripted_pipeline(), options)
    live = list(runs.run(*run_args("Please draw a Cat"), request=session("s1")))[-1][2]
    labels = re.findall(r'<div class="it-meta">(attempt [^<]*)</div>', live)
    assert labels == [
        "attempt 0 · step01_attempt0.png",
        "attempt 1 · step01_attempt1.png",
        "attempt 0 · step02_attempt0.png",
        "attempt 1 · step02_attempt1.png",
    ]
    assert 'alt="step 1 attempt 0"' in live and "attempt 2" not in live


def test_each_image_is_shown_once_in_a_gallery(options: DemoOptions, tmp_path: Path) -> None:
    """Issue 33 item 7: the final page repeated every live image, as hand-built HTML (no lightbox, no
    download). The result's images are a ``gr.Gallery``'s (captioned, each file once, named as in the
    zip), the final page is their text, and the live steps fold away once the run ends."""
    pictures = []
    for colour in ("red", "blue"):
        pictures.append(tmp_path / f"{colour}.png")
        Image.new("RGB", (8, 8), colour).save(pictures[-1])
    runs = DemoRuns(scripted_pipeline(), options)
    frames = list(
        runs.run(
            *run_args("<image><image> Please draw a Cat", list(map(str, pictures))), request=session("s1")
        )
    )
    status, _, _, fold, gallery, final, download = frames[-1]
    assert "phase-done" in status and "<img" not in final
    assert download is not None
    run_dir = Path(download).with_suffix("")
    assert gallery == [
        (str(run_dir / "images" / "input_1.png"), "input 1 (input_1.png)"),
        (str(run_dir / "images" / "input_2.png"), "input 2 (input_2.png)"),
        (
            str(run_dir / "images" / "step01_attempt1.png"),
            "1. Cat sketch: Draw the Cat. (step01_attempt1.png)",
        ),
        (
            str(run_dir / "images" / "step02_attempt1.png"),
            "2. Cat colour: The Cat in colour. (step02_attempt1.png)",
        ),
    ]
    assert all(Path(path).is_file() for path, _ in gallery)
    assert "picture: step01_attempt1.png (in the gallery)" in final and "input_1.png, input_2.png" in final
    assert fold == {"__type__": "update", "open": False}
    assert all(frame[3] == {"__type__": "update", "open": True} for frame in frames[:-1])
    # the gallery grows as steps are accepted, before the final page
    step_one = first_index([(str(f[4]),) for f in frames], "step01_attempt1.png", 0)
    assert 'data-ev="verdict-1-1"' in frames[step_one][2] and frames[step_one][5] == ""


def test_outcomes_are_gradio_messages_too(options: DemoOptions) -> None:
    """Issue 33 item 7: messages as Gradio's own ``gr.Warning`` toasts (escaped: Gradio shows them as
    HTML), besides the status line."""
    runs = DemoRuns(scripted_pipeline(), options)
    with pytest.warns(UserWarning, match=r"The request has 1 &lt;image&gt; marker\(s\) but 0 image\(s\)"):
        list(runs.run(*run_args("<image> next"), request=session("s1")))
    runs = DemoRuns(scripted_pipeline(BrokenImage()), options)
    with pytest.warns(UserWarning, match=r"internal error \(RuntimeError\)"):
        list(runs.run(*run_args("Please draw a Cat"), request=session("s1")))


def test_an_examples_images_stay_with_that_example(tmp_path: Path) -> None:
    """Issue 33 item 7: a clicked example's images rode along with the visitor's next, typed request.
    They stay while the request still has an ``<image>`` marker (the example being edited) and are
    cleared, with a note, once it has none; images the visitor uploaded are never touched. An
    example's images are known by their bytes wherever Gradio copied them (no click event needed)."""
    frames = example_images(tmp_path / "root")
    known = ExampleImages(frames)
    cache = tmp_path / "gradio-cache"
    cache.mkdir()
    example = []
    for frame in frames:
        copy = cache / f"copy-{frame.name}"
        copy.write_bytes(frame.read_bytes())
        example.append(str(copy))
    skip = {"__type__": "update"}  # gr.skip(): the component is left as it is
    assert keep_example_images("<image><image> What happens to the box?", example, known) == (skip, skip)
    note = {"__type__": "update", "value": EXAMPLE_IMAGES_REMOVED, "visible": True}
    assert keep_example_images("Please draw a Moth", example, known) == (None, note)
    assert keep_example_images("Please draw a Moth", example[:1], known) == (None, note)
    own = cache / "mine.png"
    Image.new("RGB", (256, 256), (235, 245, 255)).save(own)  # an example's size may happen; not its bytes
    for files in ([str(own)], [*example, str(own)], [str(cache / "gone.png")], None, []):
        assert keep_example_images("Please draw a Moth", files, known) == (skip, skip), files


def test_the_page_says_why_a_tiny_plan_is_off_topic(options: DemoOptions) -> None:
    """Issue 33 item 8: the tiny planner's plan for a cat is about "the moon"; the page says why, in
    one line beside the plan, when the planner that ran is a ``tiny:`` stand-in (and only then)."""
    pipe = scripted_pipeline()
    pipe.planner_backend.spec = "tiny:planner-sft"  # type: ignore[attr-defined]
    frames = list(DemoRuns(pipe, options).run(*run_args("Please draw a Cat"), request=session("s1")))
    plan = frames[-1][1]
    assert f'data-ev="tiny-plan">{html.escape(TINY_PLAN)}</p>' in plan
    download = frames[-1][6]
    assert download is not None
    index = zipfile.ZipFile(download).read("index.html").decode()
    assert str(markupsafe.escape(TINY_PLAN)) in index
    plain = list(
        DemoRuns(scripted_pipeline(), options).run(*run_args("Please draw a Cat"), request=session("s2"))
    )
    assert "tiny-plan" not in plain[-1][1]


def test_the_demo_command_gives_its_process_a_gradio_cache_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from interleave_thinker.ui.files import own_gradio_cache

    monkeypatch.setenv("GRADIO_TEMP_DIR", "/chosen/by/the/user")
    assert own_gradio_cache() == Path("/chosen/by/the/user")
    monkeypatch.delenv("GRADIO_TEMP_DIR")
    folder = own_gradio_cache()
    assert (
        folder.is_dir()
        and folder != Path("/tmp/gradio")
        and folder.name.startswith("interleave-thinker-gradio-")
    )
    assert os.environ["GRADIO_TEMP_DIR"] == str(folder)
    folder.rmdir()


def run_folder_of(frame: tuple[Any, ...]) -> Path:
    """The run folder beside the zip a finished run's last frame offers."""
    return Path(frame[6]).with_suffix("")


def test_redo_keeps_the_steps_before_it_and_names_its_parent(options: DemoOptions) -> None:
    """Issue 43: "Redo a step" after a run. Step 1 is the parent's byte for byte with no call for it
    (counted at the backends), step 2 is made again from the visitor's instruction (control characters
    removed) and seed base, the new trace names its parent, and a redo of that redo keeps its seed."""
    generator = ScriptedImageBackend()
    pipeline = scripted_pipeline(generator)
    runs = DemoRuns(pipeline, options)
    parent = run_folder_of(list(runs.run(*run_args("Please draw a Cat"), request=session("s1")))[-1])
    made, planned = len(generator.calls), len(pipeline.planner_backend.calls)  # type: ignore[attr-defined]

    frames = list(runs.redo(2, "  Paint the Cat \x00blue. ", 7, request=session("s1")))
    status, plan, live, _, gallery, final, _ = frames[-1]
    child = run_folder_of(frames[-1])
    old, new = (json.loads((f / "trace.json").read_text()) for f in (parent, child))
    assert new["parent"] == {
        "run": str(parent),
        "step": 2,
        "instruction": "Paint the Cat blue.",
        "seed_base": 7,
    }
    assert new["status"] == "succeeded" and new["steps"][0] == old["steps"][0]
    for name in ("step01_attempt0.png", "step01_attempt1.png"):
        assert (child / "images" / name).read_bytes() == (parent / "images" / name).read_bytes()
    assert len(pipeline.planner_backend.calls) == planned  # type: ignore[attr-defined]
    calls = generator.calls[made:]  # only step 2's two attempts
    assert [c.prompt for c in calls] == ["Paint the Cat blue.", "refined: try again"]
    assert [c.seed for c in calls] == [a["seed"] + 7 for a in old["steps"][1]["attempts"]]
    shown = "step02_attempt1.png"
    assert (child / "images" / shown).read_bytes() != (parent / "images" / shown).read_bytes()
    assert 'data-ev="redo"' in status and "Redo from step 2: step 1 is kept from the last run" in status
    assert "phase-done" in status and 'data-ev="verdict-1-1"' in live and 'data-ev="final"' in final
    assert 'data-ev="plan-step-2"' in plan and "Paint the Cat blue." in plan
    assert [Path(p).relative_to(child).as_posix() for p, _ in gallery] == [
        "images/step01_attempt1.png",
        "images/step02_attempt1.png",
    ]
    # a redo of the redo, from step 1 with the fields left empty: the last run (the redo) is the parent
    grand = run_folder_of(list(runs.redo(1, "", None, request=session("s1")))[-1])
    again = json.loads((grand / "trace.json").read_text())
    assert again["parent"]["run"] == str(child) and again["parent"]["step"] == 1
    assert [a["seed"] for a in again["steps"][0]["attempts"]] == [
        a["seed"] + 7 for a in old["steps"][0]["attempts"]
    ]
    assert again["planner"]["plan"]["steps"][1]["instruction"] == "Paint the Cat blue."


def test_redo_is_bounded_where_it_enters(options: DemoOptions) -> None:
    """Issue 43: each field is refused with one line naming it before anything is queued (Gradio's
    validator), and again by the handler, which leaves the last run's panes as they are."""
    runs = DemoRuns(scripted_pipeline(), options)
    assert runs.check_redo(1, "", None, session("s1"))[0]["message"] == NO_RUN  # nothing run yet
    list(runs.run(*run_args("Please draw a Cat"), request=session("s1")))
    cases = [
        ((None, "", None), 0, "Redo from step: give the number of the step to redo (1 is the first)."),
        ((0, "", None), 0, "Redo from step: 0 is not a whole number 1 or more."),
        ((1.5, "", None), 0, "Redo from step: 1.5 is not a whole number 1 or more."),
        ((3, "", None), 0, "Redo from step: the last run has no step 3 to redo; pick 1 to 2."),
        (
            (1, "x" * 1001, None),
            1,
            "New instruction: 1,001 characters; this demo takes at most 1,000 for one step. Shorten it.",
        ),
        ((1, "", -1), 2, "Seed base from that step: -1 is not a whole number 0 to 2,147,483,647."),
        ((1, "", 2**31), 2, "Seed base from that step: 2147483648 is not a whole number 0 to 2,147,483,647."),
        (
            (10**400, "", None),
            0,
            "Redo from step: the last run has no step that number to redo; pick 1 to 2.",
        ),
        (
            (1, "", 10**400),
            2,
            "Seed base from that step: that number is not a whole number 0 to 2,147,483,647.",
        ),
        ((1, "", float("inf")), 2, "Seed base from that step: inf is not a whole number 0 to 2,147,483,647."),
    ]
    for args, field, message in cases:
        verdicts = runs.check_redo(*args, session("s1"))
        assert [v["is_valid"] for v in verdicts] == [i != field for i in range(3)], args
        assert verdicts[field]["message"] == message
    assert all(v["is_valid"] for v in runs.check_redo(2, "x" * 1000, 2**31 - 1, session("s1")))
    assert runs.check_redo(1, "", None, session("s2"))[0]["message"] == NO_RUN  # not another session's
    folders = set((options.out_root / "s1").iterdir())
    frames = list(runs.redo(3, "", None, request=session("s1")))
    assert len(frames) == 1 and "phase-refused" in frames[0][0]
    assert "error: Redo from step: the last run has no step 3 to redo; pick 1 to 2." in frames[0][0]
    assert all(pane == gr.skip() for pane in frames[0][1:])  # the last run stays on the page
    assert set((options.out_root / "s1").iterdir()) == folders

    failing = DemoRuns(scripted_pipeline(ScriptedImageBackend(fail_on=lambda p: p == "a Cat")), options)
    list(failing.run(*run_args("Please draw a Cat"), request=session("s3")))  # step 1 fails
    assert failing.check_redo(2, "", None, session("s3"))[0]["message"] == (
        "Redo from step: the last run has no step 2 to redo (it stopped at step 1); pick 1 to 1."
    )
