"""A run's files cost little CPU and memory per request in flight, and are written as before.

Pinned here: an image is PNG-encoded once however often backends send it (``backends/encoding.py``);
a run with a folder keeps its images as the PNG bytes it wrote, byte-identical to the former writer
(``runtime/recorder.py``), or as a server sent them when that was a plain RGB PNG; the batch journal is parsed once, yet sees another writer's lines
(``runtime/store.py``); and inside a batch request's greenlet a file write runs in a writer thread
(``runtime/file_writes.py``).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import json
import random
import threading
from pathlib import Path

import pytest
from PIL import Image

from interleave_thinker.backends import encoding
from interleave_thinker.backends.encoding import png_bytes
from interleave_thinker.core import green
from interleave_thinker.core.images import png_bytes as plain_png
from interleave_thinker.core.run_folder import JOURNAL
from interleave_thinker.core.types import Request, Trace
from interleave_thinker.runtime.file_writes import off_loop, write_file
from interleave_thinker.runtime.recorder import ImageShelf, RunRecorder
from interleave_thinker.runtime.store import RunStore


def noise(size: int = 48, seed: int = 3) -> Image.Image:
    """A seeded RGB picture that compresses poorly, like a real one."""
    return Image.frombytes("RGB", (size, size), random.Random(seed).randbytes(size * size * 3))


def decoded(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as opened:
        return opened.convert("RGB")


def test_an_image_is_encoded_once_per_setting_and_forgotten_with_it() -> None:
    image = noise()
    first = png_bytes(image)
    assert png_bytes(image) is first  # the same bytes object: not encoded again
    assert png_bytes(image, keep_mode=True) is first  # an RGB image's bytes do not depend on keep_mode
    # an upload's level 1 takes the level-6 bytes already made (same pixels, smaller, no new encode)
    assert png_bytes(image, compress_level=1) is first
    assert first == plain_png(image)  # what the run folder's writer makes
    # the other way round, a file's level 6 never takes a level-1 encoding: it is encoded again
    sent_first = noise(seed=3)
    fast = png_bytes(sent_first, compress_level=1)
    written = png_bytes(sent_first)
    assert written != fast and written == plain_png(sent_first)  # zlib headers differ by level
    assert decoded(fast).tobytes() == decoded(written).tobytes() == sent_first.tobytes()
    ident = id(image)
    del image
    gc.collect()
    assert ident not in encoding._ENCODED._entries


def png_of(image: Image.Image, **save: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **save)
    return buffer.getvalue()


def test_a_plain_rgb_png_reply_is_kept_as_it_came_and_anything_else_is_encoded_again(tmp_path: Path) -> None:
    from PIL import PngImagePlugin

    reply = png_of(noise(seed=5), compress_level=9)  # a server's own encoding, not ours
    image = encoding.decode_image(reply)
    assert encoding.plain_rgb_png(reply)
    assert png_bytes(image) is reply and png_bytes(image, compress_level=1) is reply
    recorder = RunRecorder(Trace(request=Request(text="x")), tmp_path)
    recorder.add_image("step1.png", image)
    assert (tmp_path / "images" / "step1.png").read_bytes() == reply  # written as the server sent it

    text = PngImagePlugin.PngInfo()
    text.add_text("Comment", "<script>alert(1)</script>")
    unusual = {
        "a text chunk": png_of(noise(seed=5), pnginfo=text),
        "bytes after IEND": reply + b"tail",
        "RGBA": png_of(noise(seed=5).convert("RGBA")),
    }
    interlaced = bytearray(reply)
    interlaced[8 + 8 + 12] = 1  # IHDR's interlace byte: refused before any pixel is trusted
    assert not encoding.plain_rgb_png(bytes(interlaced))
    for why, raw in unusual.items():
        assert not encoding.plain_rgb_png(raw), why
        decoded_image = encoding.decode_image(raw)
        again = png_bytes(decoded_image)
        assert again != raw and again == plain_png(decoded_image), why
        assert b"tEXt" not in again and decoded(again).tobytes() == noise(seed=5).tobytes(), why


def test_equal_images_that_are_different_objects_are_encoded_each() -> None:
    one, other = noise(seed=1), noise(seed=1)
    assert png_bytes(one) == png_bytes(other) and png_bytes(one) is not png_bytes(other)
    assert decoded(png_bytes(Image.new("RGB", (8, 8), (9, 8, 7)))).getpixel((3, 3)) == (9, 8, 7)


def test_a_recorder_with_a_folder_keeps_png_bytes_and_writes_what_it_wrote_before(tmp_path: Path) -> None:
    recorder = RunRecorder(Trace(request=Request(text="x")), tmp_path)
    first, second = noise(seed=1), noise(seed=2)
    recorder.add_image("a.png", first)
    recorder.add_image("b.png", second)
    assert isinstance(recorder.images, ImageShelf)
    assert (tmp_path / "images" / "a.png").read_bytes() == plain_png(first)
    assert recorder.images["b.png"] is second  # the last one added stays as it was
    again = recorder.images["a.png"]
    assert again is not first and again.mode == "RGB" and again.tobytes() == first.tobytes()
    assert sorted(recorder.images) == ["a.png", "b.png"] and len(recorder.images) == 2
    out = tmp_path / "copy"
    recorder.save(out)
    assert (out / "images" / "a.png").read_bytes() == plain_png(first)
    assert (out / "images" / "b.png").read_bytes() == plain_png(second)
    assert json.loads((out / "trace.json").read_text())["request"]["text"] == "x"


def test_a_recorder_without_a_folder_keeps_the_images_themselves() -> None:
    recorder = RunRecorder(Trace(request=Request(text="x")))
    image = noise()
    recorder.add_image("a.png", image)
    assert recorder.images == {"a.png": image} and recorder.images["a.png"] is image


def test_an_image_set_on_the_shelf_is_kept_as_it_is() -> None:
    shelf = ImageShelf()
    kept, added = noise(seed=4), noise(seed=5)
    shelf.put_png("a.png", added, png_bytes(added))
    shelf["a.png"] = kept  # a resumed run sets the images it read back
    assert shelf["a.png"] is kept
    del shelf["a.png"]
    assert "a.png" not in shelf


def test_the_journal_is_read_once_but_sees_another_writer(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    assert store.finished() == {}
    for request_id in ("a", "c"):  # a succeeded request is kept only with its files (the disk check)
        folder = store.request_dir(request_id)
        folder.mkdir(parents=True)
        done = Trace(request=Request(text=request_id), status="succeeded")
        (folder / "trace.json").write_text(done.model_dump_json(), encoding="utf-8")
    store.mark("a", "succeeded")
    store.mark("b", "failed", "boom")
    assert store.finished() == {"a": "succeeded", "b": "failed"}
    with (tmp_path / JOURNAL).open("a", encoding="utf-8") as handle:  # e.g. an earlier run's tool
        handle.write(json.dumps({"id": "c", "status": "succeeded"}) + "\n" + '{"id": "torn')
    assert store.finished() == {"a": "succeeded", "b": "failed", "c": "succeeded"}
    assert (store.status("c"), store.status("b"), store.status("zzz")) == ("succeeded", "failed", None)
    store.journal()["a"]["status"] = "changed by a caller"
    assert RunStore(tmp_path).finished() == store.finished()


def test_a_write_from_a_greenlet_runs_in_a_writer_thread(tmp_path: Path) -> None:
    def where() -> str:
        return threading.current_thread().name

    def request() -> tuple[str, str]:
        write_file(tmp_path / "x.json", '{"a": 1}')
        return off_loop(where), where()

    async def main() -> tuple[str, str]:
        return await green.run_green(request)

    writer, caller = asyncio.run(main())
    assert writer.startswith("run-files") and caller == threading.current_thread().name
    assert off_loop(where) == threading.current_thread().name  # outside a greenlet: right here
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}


def test_a_large_reply_is_decoded_off_the_loop_and_a_small_one_right_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[str] = []
    decode = encoding._decode

    def recorded(raw: bytes, max_pixels: int, asked: encoding.Asked = None) -> Image.Image:
        threads.append(threading.current_thread().name)
        return decode(raw, max_pixels, asked)

    monkeypatch.setattr(encoding, "_decode", recorded)
    large = png_of(Image.new("RGB", (512, 512), (3, 4, 5)))  # a few KB, but 262,144 pixels to inflate
    small = png_of(noise(size=200, seed=8))  # 120 KB of noise, 40,000 pixels
    assert len(large) < len(small) and 512 * 512 >= encoding.OFF_LOOP_PIXELS > 200 * 200

    def request() -> list[bytes]:
        return [
            encoding.decode_image(large).tobytes(),
            encoding.decode_base64_image(base64.b64encode(large).decode()).tobytes(),
            encoding.decode_image(small).tobytes(),
        ]

    async def main() -> list[bytes]:
        return await green.run_green(request)

    pixels = asyncio.run(main())
    loop_thread = threading.current_thread().name
    assert threads[0].startswith("image-codec") and threads[1].startswith("image-codec")
    assert threads[2] == loop_thread
    flat = Image.new("RGB", (512, 512), (3, 4, 5)).tobytes()
    assert pixels == [flat, flat, noise(size=200, seed=8).tobytes()]
    with pytest.raises(ValueError, match="Error"):  # not base64: the full decode says why, as before
        encoding.decode_base64_image("!" * 100)
    encoding.decode_image(large)  # outside a greenlet: right here
    assert threads[3] == loop_thread


def test_a_write_makes_its_folder_again_when_a_clean_up_removes_a_parent_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's sweep removes empty session folders; one may go between the making of a session folder
    and of the run folder inside it (seen once in a full test run: a demo run failed on its first
    trace write). The write makes the folder again instead of failing."""
    from interleave_thinker.core import paths

    run = tmp_path / "demo" / "session" / "run"
    real_mkdir = Path.mkdir
    sweeps, every_time = [0], [False]

    def mkdir_with_a_sweep(
        self: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False
    ) -> None:
        if self.name == "run" and (every_time[0] or sweeps[0] < 2):  # the parent made, then swept
            sweeps[0] += 1
            real_mkdir(self.parent, parents=True, exist_ok=True)
            self.parent.rmdir()
            real_mkdir(self, mode, parents=False, exist_ok=exist_ok)  # FileNotFoundError, as pathlib's
        real_mkdir(self, mode, parents, exist_ok)

    monkeypatch.setattr(Path, "mkdir", mkdir_with_a_sweep)
    paths.write_atomic(run / "trace.json", "{}")
    assert (run / "trace.json").read_text() == "{}" and sweeps[0] == 2
    assert sorted(p.name for p in run.iterdir()) == ["trace.json"]  # no partial file left
    every_time[0], sweeps[0] = True, 0  # swept every time: the write gives up, with the error
    with pytest.raises(FileNotFoundError):
        paths.write_atomic(tmp_path / "demo" / "other" / "run" / "trace.json", "{}")
    assert sweeps[0] == paths.FOLDER_TRIES
