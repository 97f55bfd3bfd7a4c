"""Reference images reach every image backend's wire, in order and byte for byte, or are refused at load.

Each kind sends one edit with three references of distinct solid colours; the test double of its
service (or the pipeline call of the local kind) records what arrived, and the test decodes every image
and compares its pixels with what was sent: the edited image first, then the references as given.
FastVideo takes none: ``loop.references`` is refused when the pipeline is built. ``serve generator``
takes the list on ``/edit`` and several parts on ``/v1/images/edits``, bounded at its boundary; the real
service (the tiny FLUX.2-klein behind it) answers the ``http:``, ``openai-images:`` and ``vllm-omni:``
clients with the pixels the local backend makes from the same references.
"""

from __future__ import annotations

import base64
import io
import json
import os
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.backends.image.fastvideo_backend import FastVideoImageBackend
from interleave_thinker.backends.image.gemini_image_backend import GeminiImageBackend
from interleave_thinker.backends.image.http_backend import HTTPImageBackend
from interleave_thinker.backends.image.omni_backend import OmniImagesBackend, SGLangDiffusionBackend
from interleave_thinker.backends.image.openai_images_backend import OpenAIImagesBackend
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.references import POLICY_NEEDS, check_references
from interleave_thinker.backends.specs import check_specs
from interleave_thinker.backends.wrapping import Wrapper
from interleave_thinker.core.config import ReferencePolicy
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.server.generator.app import create_app as generator_app
from interleave_thinker.server.generator.pool import WorkerPool
from interleave_thinker.server.generator.settings import ServiceSettings
from interleave_thinker.server.generator.worker import run_job
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.doubles.fastvideo import install_fastvideo
from interleave_thinker.testing.doubles.gemini_sdk import ImageModels
from interleave_thinker.testing.doubles.generator import ScriptedEditServer
from interleave_thinker.testing.doubles.omni import OmniServer, OmniState, scripted_engine
from interleave_thinker.testing.doubles.openai_images import openai_images_server
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend

KEY = "references-key"
EDITED = Image.new("RGB", (64, 64), (128, 128, 128))
REFERENCES = tuple(Image.new("RGB", (64, 64), colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255)))


def edit(*, references: tuple[Image.Image, ...] = REFERENCES, **changes: Any) -> ImageRequest:
    fields: dict[str, Any] = {"width": 64, "height": 64, "seed": 3, "steps": 2, **changes}
    return ImageRequest("keep the red fox", image=EDITED, references=references, **fields)


def pixels(data: bytes | Image.Image) -> bytes:
    """The RGB pixels of an encoded image (or of an image), for exact comparison."""
    if isinstance(data, Image.Image):
        return data.convert("RGB").tobytes()
    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB").tobytes()


SENT = [pixels(EDITED), *(pixels(r) for r in REFERENCES)]
"""What every wire must carry, in this order: the edited image, then the three references."""


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


# --- each kind: the references on its wire --------------------------------------------------------


def test_http_sends_the_edited_image_then_the_references_as_the_image_list() -> None:
    server = ScriptedEditServer()
    try:
        with HTTPImageBackend(server.url) as backend:
            backend.generate(edit())
            backend.generate(edit(references=()))
    finally:
        server.close()
    with_references, release = (r.body["image"] for r in server.received)
    assert isinstance(with_references, list) and len(with_references) == 4
    assert [pixels(base64.b64decode(item)) for item in with_references] == SENT
    assert isinstance(release, str)  # the released wire is unchanged: one base64 string
    assert pixels(base64.b64decode(release)) == SENT[0]


@pytest.mark.parametrize("backend_class", [OmniImagesBackend, SGLangDiffusionBackend])
def test_omni_sends_one_image_part_per_image_and_the_engine_gets_the_list(
    backend_class: type[OmniImagesBackend],
) -> None:
    state = OmniState(engine=scripted_engine)
    with OmniServer(state) as server, backend_class(server.url, model=OmniState.model_name) as backend:
        assert backend.max_references == 3  # the served FLUX.2 [klein] takes 4 input images
        backend.generate(edit())
    (received,) = [r for r in state.received if r["path"] == "/v1/images/edits"]
    assert [pixels(data) for data in received["images"]] == SENT
    (call,) = state.engine_calls
    assert [pixels(image) for image in call["image"]] == SENT


def test_openai_images_sends_an_image_array_as_openai_python_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with (
        openai_images_server(KEY) as (state, url),
        OpenAIImagesBackend("gpt-image-1", base_url=url) as backend,
    ):
        assert backend.max_references == 15  # GPT image models take 16 images
        backend.generate(edit())
        backend.generate(edit(references=()))
    with_references, release = state.received
    assert [name for name, _ in with_references.images] == ["image[]"] * 4
    assert [pixels(data) for _, data in with_references.images] == SENT
    assert [name for name, _ in release.images] == ["image"]  # the released wire is unchanged


def test_gemini_image_sends_every_image_as_an_inline_part_after_the_prompt() -> None:
    client = ImageModels()
    with GeminiImageBackend("nano-banana-pro", client=client) as backend:
        assert backend.max_references == 13  # Gemini 3 image models: 14 input images
        backend.generate(edit())
    contents = client.calls[0]["contents"]
    assert contents[0] == "keep the red fox" and len(contents) == 5
    assert [pixels(data) for data in client.inline_images()] == SENT


def test_a_request_over_the_cap_is_refused_naming_the_backend_its_cap_and_the_setting() -> None:
    client = ImageModels()
    backend = GeminiImageBackend("nano-banana", client=client)  # 2.5 Flash Image: 3 inputs
    with backend, pytest.raises(ConfigError) as info:
        backend.generate(edit())
    message = str(info.value)
    assert message.startswith("gemini-image:gemini-2.5-flash-image takes at most 2 reference images, got 3")
    assert "loop.references" in message and "\n" not in message
    assert client.calls == []  # nothing was sent


def test_dall_e_takes_no_references() -> None:
    with OpenAIImagesBackend("dall-e-2", base_url="http://127.0.0.1:9/v1") as backend:
        assert backend.max_references == 0
        with pytest.raises(ConfigError, match="openai-images:dall-e-2 takes no reference images"):
            backend.generate(edit())


# --- FastVideo, and the load-time check ---------------------------------------------------------------


def config(policy: ReferencePolicy) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": {"references": policy},
        }
    )


def build(generator: Any, policy: ReferencePolicy) -> Pipeline:
    return Pipeline(
        planner=ScriptedVLMBackend([]),
        critic=ScriptedVLMBackend([]),
        generator=generator,
        config=config(policy),
        templates=builtin_templates(),
    )


@pytest.mark.parametrize("policy", ["previous+inputs", "anchor"])
def test_fastvideo_refuses_a_references_policy_when_the_pipeline_is_built(
    monkeypatch: pytest.MonkeyPatch, policy: ReferencePolicy
) -> None:
    install_fastvideo(monkeypatch)
    with FastVideoImageBackend("fake/model") as backend:
        with pytest.raises(ConfigError) as info:
            build(Wrapper(backend), policy)  # seen through a wrapper, as the batch runtime wraps it
        message = str(info.value)
        assert message.startswith("fastvideo:fake/model takes no reference images")
        assert f"loop.references: {policy} needs {POLICY_NEEDS[policy]}" in message
        assert "set loop.references: release" in message and "\n" not in message
        build(backend, "release").close()  # the released loop needs none
        with pytest.raises(ConfigError, match="fastvideo:fake/model takes no reference images, got 3"):
            backend.generate(edit())


def test_fastvideo_is_refused_from_its_spec_before_anything_loads() -> None:
    """``check_specs`` runs before any model loads (the CLI, ``Pipeline.from_config``): no GPU model is
    loaded only to be refused; FastVideo itself is absent here, so loading it would fail otherwise."""
    refused = config("anchor").model_copy(update={"generator": "fastvideo:fake/model"})
    with pytest.raises(ConfigError) as info:
        check_specs(refused, roles=("generator",))
    assert str(info.value).startswith("fastvideo:fake/model takes no reference images")
    check_specs(refused.model_copy(update={"loop": config("release").loop}), roles=("generator",))


def test_the_policies_are_checked_against_the_cap() -> None:
    assert set(POLICY_NEEDS) == {"release", "previous+inputs", "anchor"}
    one = ScriptedImageBackend()
    one.max_references = 1
    check_references(one, "previous+inputs")
    with pytest.raises(ConfigError) as info:
        check_references(one, "anchor")
    assert "takes only 1 reference image, and loop.references: anchor needs 2" in str(info.value)
    check_references(object(), "release")  # a backend declaring nothing takes none, which release needs
    build(Wrapper(ScriptedImageBackend()), "anchor").close()  # a wrapper forwards the cap it wraps (8)


# --- serve generator: the boundary (no workers) and the worker ------------------------------------------


@pytest.fixture(scope="module")
def boundary() -> Iterator[httpx.Client]:
    settings = ServiceSettings("tiny:generator", max_pixels=256 * 256)
    with (
        AppServer(generator_app(settings, WorkerPool(settings))) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


def png_claiming(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header claims ``width`` x ``height`` (a decompression bomb's header)."""
    data = bytearray(png(Image.new("RGB", (1, 1))))
    data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    return bytes(data)


def error_of(reply: httpx.Response) -> str:
    assert reply.status_code == 400, reply.text[:300]
    error = reply.json()["error"]
    return str(error if isinstance(error, str) else error["message"])


def test_serve_generator_bounds_the_list_on_edit(boundary: httpx.Client) -> None:
    image = base64.b64encode(png(EDITED)).decode()
    too_many = boundary.post("/edit", json={"prompt": "p", "image": [image] * 17})
    assert "'image' holds 17 images, over the limit of 16" in error_of(too_many)
    bomb = base64.b64encode(png_claiming(5000, 5000)).decode()
    big = boundary.post("/edit", json={"prompt": "p", "image": [image, image, bomb]})
    assert "reference image 2 ('image' item 3) is 5000x5000" in error_of(big)
    assert "--max-pixels" in error_of(big)
    not_text = boundary.post("/edit", json={"prompt": "p", "image": [image, 7]})
    assert "reference image 1 ('image' item 2) must be a base64 string" in error_of(not_text)


def test_serve_generator_bounds_the_parts_on_images_edits(boundary: httpx.Client) -> None:
    data = {"prompt": "p", "size": "64x64"}
    image = ("image.png", png(EDITED), "image/png")
    too_many = boundary.post("/v1/images/edits", data=data, files=[("image[]", image)] * 17)
    assert "'image' holds 17 images, over the limit of 16" in error_of(too_many)
    broken = ("reference1.png", b"not a png", "image/png")
    unreadable = boundary.post("/v1/images/edits", data=data, files=[("image", image), ("image", broken)])
    assert "reference image 1 ('image' item 2) is not a readable image" in error_of(unreadable)


def job(references: int) -> dict[str, Any]:
    return {
        "prompt": "p",
        "image_png": png(EDITED),
        "width": 32,
        "height": 32,
        "seed": 1,
        "steps": None,
        "guidance": None,
        "reference_pngs": tuple(png(r) for r in (REFERENCES * 3)[:references]),
    }


def test_the_worker_passes_the_references_and_refuses_more_than_its_backend_takes() -> None:
    backend = ScriptedImageBackend()
    assert run_job(backend, job(3), max_pixels=10**6)["ok"] is True
    (request,) = backend.calls
    assert request.image is not None  # an edit: the picture to change came with the references
    assert [pixels(i) for i in (request.image, *request.references)] == SENT
    refused = run_job(backend, job(9), max_pixels=10**6)
    assert refused["ok"] is False and refused["kind"] == "input"  # answered 400
    assert refused["error"].startswith("scripted-image takes at most 8 reference images, got 9")
    assert len(backend.calls) == 1


# --- the local FLUX.2 pipeline, and the real service behind the clients ----------------------------------


@pytest.fixture(scope="module")
def tiny_generator() -> Any:
    from interleave_thinker.backends.specs import BackendOptions, load_image_backend

    return load_image_backend("tiny:generator", BackendOptions(device="cpu"))


class PipelineSpy:
    """Records the keywords of each pipeline call, then runs the real pipeline."""

    def __init__(self, pipe: Any) -> None:
        self.pipe, self.calls = pipe, []  # type: ignore[var-annotated]

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.pipe(**kwargs)


@pytest.mark.slow
def test_diffusers_flux2_gets_the_references_in_its_image_list(
    tiny_generator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tiny_generator.max_references == 3  # Flux2KleinPipeline: 4 input images
    spy = PipelineSpy(tiny_generator.pipe)
    monkeypatch.setattr(tiny_generator, "pipe", spy)
    with_references = tiny_generator.generate(edit())
    without = tiny_generator.generate(edit(references=()))
    assert [pixels(image) for image in spy.calls[0]["image"]] == SENT
    assert pixels(with_references) != pixels(without)  # the model conditions on them
    with pytest.raises(ConfigError, match="takes at most 3 reference images, got 4"):
        tiny_generator.generate(edit(references=(*REFERENCES, EDITED)))


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    from interleave_thinker.server.generator.launcher import GeneratorProcess

    with GeneratorProcess("tiny:generator", workers=1, device="cpu") as running:
        yield running.url


PATIENT = {"retry": None, "cooldown": 0}


@pytest.mark.slow
def test_serve_generator_round_trips_three_references_through_both_routes(
    service: str, tiny_generator: Any
) -> None:
    """``/edit`` (``http:``) and ``/v1/images/edits`` (``vllm-omni:`` repeated ``image`` parts,
    ``openai-images:`` ``image[]`` parts) give the local backend's pixels for the same references, and
    other pixels for the references reversed: all three arrived, in order."""
    import torch

    # the local run with the service's thread count (its one CPU worker takes every core: ServiceSettings
    # .threads_for), not this process's (one under xdist): a thread count changes the last bit of a pixel
    threads = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        request = edit(seed=7)
        reversed_order = edit(seed=7, references=REFERENCES[::-1])
        local, local_reversed = (pixels(tiny_generator.generate(r)) for r in (request, reversed_order))
        unseeded = edit(seed=0, steps=None)
        local_unseeded = pixels(tiny_generator.generate(unseeded))
    finally:
        torch.set_num_threads(threads)
    assert local != local_reversed
    with HTTPImageBackend(service) as http, OmniImagesBackend(service) as omni:
        assert pixels(http.generate(request)) == local
        assert pixels(omni.generate(request)) == local
        assert pixels(http.generate(reversed_order)) == local_reversed
        with pytest.raises(BackendError, match="takes at most 3 reference images, got 4"):
            http.generate(edit(references=(*REFERENCES, EDITED)))  # the served backend's own cap: 400
    # The OpenAI images API has no seed or steps: the service uses seed 0 and the model's steps.
    with OpenAIImagesBackend("tiny:generator", base_url=f"{service}/v1") as openai:
        assert pixels(openai.generate(unseeded)) == local_unseeded


def test_the_json_of_a_job_keeps_the_references_in_order() -> None:
    from interleave_thinker.server.generator.protocol import parse_edit_request

    images = [base64.b64encode(png(i)).decode() for i in (EDITED, *REFERENCES)]
    parsed = parse_edit_request(json.dumps({"prompt": "p", "image": images}).encode(), max_pixels=10**6)
    assert [pixels(p) for p in (parsed.image_png, *parsed.reference_pngs)] == SENT  # type: ignore[arg-type]
    assert (parsed.width, parsed.height) == (64, 64)  # the edited image's size
