"""The vllm-omni / sglang-diffusion generator backend against a vLLM-Omni stand-in on 127.0.0.1
(``interleave_thinker.testing.doubles.omni``): every field of the JSON and multipart requests, each failure's message,
retries over a pool, and, with the tiny FLUX.2-klein behind the stand-in, pixels identical to the
local ``diffusers`` backend."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker.backends.image.omni_backend import (
    OmniImagesBackend,
    SGLangDiffusionBackend,
    parse_target,
)
from interleave_thinker.backends.protocols import ImageRequest
from interleave_thinker.backends.specs import BackendOptions, load_image_backend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.server.generator.launcher import free_port
from interleave_thinker.testing.doubles.omni import OmniServer, OmniState, diffusers_engine, scripted_engine
from tests.helpers.common import assert_served_pixels, stable_served

KLEIN = "black-forest-labs/FLUX.2-klein-4B"
QWEN = "Qwen/Qwen-Image-Edit-2511"
PATIENT = RemoteOptions(max_retries=0, timeout=300.0)  # a loaded machine must not turn into a retry
FAST = RemoteOptions(max_retries=2, backoff_base=0.001, backoff_max=0.002, timeout=10.0, cooldown=60.0)


def backend(url: str, model: str | None = KLEIN, remote: RemoteOptions = FAST) -> OmniImagesBackend:
    spec = f"vllm-omni:{url}" + (f"#{model}" if model else "")
    loaded = load_image_backend(spec, BackendOptions(remote=remote))
    assert isinstance(loaded, OmniImagesBackend)
    return loaded


@pytest.fixture
def server() -> Iterator[OmniServer]:
    with OmniServer(OmniState(engine=scripted_engine)) as running:
        yield running


def posts(state: OmniState) -> list[dict[str, Any]]:
    return [r for r in state.received if r["path"].startswith("/v1/images")]


# -- specs ---------------------------------------------------------------------------------------


def test_spec_takes_a_pool_a_v1_suffix_a_file_and_an_optional_model(tmp_path: Path) -> None:
    hosts = tmp_path / "omni.txt"
    hosts.write_text("# generators\nhttp://c:8000/v1 slots=4\n\nd:8000\n")
    urls, model, slots = parse_target("vllm-omni", f"http://a:8000/v1/,b:8001,@{hosts}#{QWEN}")
    assert urls == ["http://a:8000", "http://b:8001", "http://c:8000", "http://d:8000"]
    assert model == QWEN and slots == {"http://c:8000": 4}  # keyed by the normalised root
    assert parse_target("vllm-omni", "a:1") == (["http://a:1"], None, {})
    with pytest.raises(ConfigError, match=r"names no server; write vllm-omni:http://host:8000\[#MODEL\]"):
        parse_target("vllm-omni", "#model")
    with pytest.raises(ConfigError, match="is not an address"):
        parse_target("vllm-omni", "ftp://a:1")
    sglang = load_image_backend("sglang-diffusion:http://h:30010/v1#m", BackendOptions(remote=FAST))
    assert isinstance(sglang, SGLangDiffusionBackend) and sglang.name == "sglang-diffusion:http://h:30010#m"


def test_a_named_but_empty_key_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNI_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"remote\.api_key_env names OMNI_TOKEN"):
        load_image_backend("vllm-omni:a:1", BackendOptions(remote=RemoteOptions(api_key_env="OMNI_TOKEN")))


def test_the_backend_loads_no_model_library() -> None:
    code = (
        "import sys; from interleave_thinker.backends.specs import load_image_backend as load; "
        "load('vllm-omni:http://127.0.0.1:9#m').close(); "
        "print(sorted(m for m in ('torch', 'transformers', 'diffusers') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


# -- the requests ----------------------------------------------------------------------------------


def test_text_to_image_sends_the_settings_the_local_backend_would_use(server: OmniServer) -> None:
    with backend(server.url) as client:
        image = client.generate(ImageRequest("a red fox", width=48, height=32, seed=7))
        client.generate(ImageRequest("a red fox", width=48, height=32, seed=7, steps=9, guidance=2.5))
    assert image.size == (48, 32)
    first, second = (r["json"] for r in posts(server.state))
    assert first == {
        "prompt": "a red fox",
        "n": 1,
        "size": "48x32",
        "response_format": "b64_json",
        "output_format": "png",
        "seed": 7,
        "generator_device": "cpu",
        "num_inference_steps": 4,  # FLUX.2-klein's defaults, as the diffusers backend fills them
        "guidance_scale": 1.0,
        "model": KLEIN,
    }
    assert (second["num_inference_steps"], second["guidance_scale"]) == (9, 2.5)
    assert image.tobytes() == scripted_engine({**server.state.engine_calls[0]}).tobytes()


def test_an_edit_is_multipart_with_the_latest_image_as_a_png() -> None:
    source = Image.new("RGB", (40, 24), (10, 200, 30))
    source.putpixel((3, 5), (255, 0, 255))
    with (
        OmniServer(OmniState(engine=scripted_engine, model_name=QWEN)) as server,
        backend(server.url, QWEN) as client,
    ):
        client.generate(
            ImageRequest("make it night", image=source, width=40, height=24, seed=3, guidance=4.0)
        )
    (edit,) = posts(server.state)
    assert edit["path"] == "/v1/images/edits"
    assert edit["form"] == {
        "prompt": "make it night",
        "n": "1",
        "size": "40x24",
        "response_format": "b64_json",
        "output_format": "png",
        "seed": "3",
        "generator_device": "cpu",
        "num_inference_steps": "50",  # Qwen-Image-Edit's default steps; its guidance is true CFG
        "true_cfg_scale": "4.0",
        "model": QWEN,
    }
    filename, content_type, data = edit["files"]["image"]
    assert (filename, content_type) == ("image.png", "image/png")
    with Image.open(io.BytesIO(data)) as sent:
        assert sent.format == "PNG" and sent.convert("RGB").tobytes() == source.tobytes()
    call = server.state.engine_calls[0]
    assert (call["width"], call["height"], call["true_cfg_scale"]) == (40, 24, 4.0)


def test_without_a_model_the_served_one_is_read_once_and_not_sent() -> None:
    with OmniServer(OmniState(engine=scripted_engine, model_name=QWEN)) as running:
        with backend(running.url, model=None) as client:
            client.generate(ImageRequest("a", width=16, height=16, seed=1))
            client.generate(ImageRequest("b", width=16, height=16, seed=2))
        bodies = [r["json"] for r in posts(running.state)]
        models_reads = [r for r in running.state.received if r["path"] == "/v1/models"]
    assert len(models_reads) == 1
    assert all(
        "model" not in b and b["true_cfg_scale"] == 5.0 and b["num_inference_steps"] == 50 for b in bodies
    )


# -- failures ------------------------------------------------------------------------------------


def test_a_model_the_server_does_not_serve_is_named_with_the_fix(server: OmniServer) -> None:
    with backend(server.url, "someone/other-model") as client, pytest.raises(BackendError) as caught:
        client.generate(ImageRequest("x", width=16, height=16))
    message = str(caught.value)
    assert "HTTP 400" in message and f"This server serves '{KLEIN}', not 'someone/other-model'" in message
    assert "fix #MODEL" in message
    assert len(posts(server.state)) == 1  # a 400 is not retried


def test_a_size_over_the_server_limit_says_what_to_change() -> None:
    state = OmniState(engine=scripted_engine, max_pixels=32 * 32)
    with OmniServer(state) as running, backend(running.url) as client, pytest.raises(BackendError) as caught:
        client.generate(ImageRequest("x", width=64, height=64))
    message = str(caught.value)
    assert "Requested image size 64x64 exceeds the maximum allowed size of 1024 pixels" in message
    assert "generation.width / generation.height" in message and "--max-generated-image-size" in message


@pytest.mark.parametrize("edits_route", [True, False])
def test_a_server_that_cannot_edit_says_so(edits_route: bool) -> None:
    state = OmniState(engine=scripted_engine, supports_edits=False)
    with OmniServer(state, edits_route=edits_route) as running, backend(running.url) as client:
        assert client.generate(ImageRequest("t2i still works", width=16, height=16)).size == (16, 16)
        with pytest.raises(BackendError, match="The served model cannot edit images") as caught:
            client.generate(ImageRequest("edit", image=Image.new("RGB", (16, 16)), width=16, height=16))
    assert ("HTTP 400" if edits_route else "HTTP 404 from") in str(caught.value)
    assert edits_route or "/v1/images/edits: Not Found" in str(caught.value)


def test_other_4xx_show_the_server_message_and_are_not_retried(server: OmniServer) -> None:
    with backend(server.url) as client, pytest.raises(BackendError) as caught:
        client.generate(ImageRequest("x", width=16, height=16, steps=500))
    message = str(caught.value)
    assert (
        "HTTP 400" in message and "num_inference_steps" in message and "less than or equal to 200" in message
    )
    assert len(posts(server.state)) == 1


def test_a_wrong_url_or_a_server_that_is_down_is_named(server: OmniServer) -> None:
    with backend(f"{server.url}/api") as client, pytest.raises(BackendError) as caught:
        client.generate(ImageRequest("x", width=16, height=16))
    assert f"HTTP 404 from {server.url}/api/v1/images/generations" in str(caught.value)
    assert "give the server root or its /v1 URL" in str(caught.value)
    with backend(f"127.0.0.1:{free_port()}") as client, pytest.raises(BackendError) as caught:
        client.generate(ImageRequest("x", width=16, height=16))
    assert "3 tries failed" in str(caught.value) and "ConnectError" in str(caught.value)


def test_5xx_and_429_are_retried_until_an_image_comes(server: OmniServer) -> None:
    server.state.failures += [(503, "engine busy", {}), (429, "slow down", {"Retry-After": "0"})]
    with backend(server.url) as client:
        assert client.generate(ImageRequest("x", width=16, height=16)).size == (16, 16)
    assert [r.get("failed") for r in posts(server.state)] == [503, 429, None]


def test_5xx_beyond_the_retries_ends_with_the_last_server_message(server: OmniServer) -> None:
    server.state.failures += [
        (500, f"Image generation failed: CUDA out of memory #{i}", {}) for i in range(3)
    ]
    with backend(server.url) as client, pytest.raises(BackendError) as caught:
        client.generate(ImageRequest("x", width=16, height=16))
    assert "3 tries failed" in str(caught.value) and "CUDA out of memory #2" in str(caught.value)


def test_a_slow_server_times_out_with_a_clear_message() -> None:
    slow = RemoteOptions(max_retries=1, backoff_base=0.001, backoff_max=0.002, timeout=0.2)
    state = OmniState(engine=scripted_engine, delay=0.6)
    with (
        OmniServer(state) as running,
        backend(running.url, remote=slow) as client,
        pytest.raises(BackendError) as caught,
    ):
        client.generate(ImageRequest("x", width=16, height=16))
    assert "2 tries failed" in str(caught.value) and "timed out after 0.2s" in str(caught.value)


def test_a_pool_routes_around_a_failing_endpoint() -> None:
    bad_state = OmniState(engine=scripted_engine, failures=[(502, "bad gateway", {})] * 10)
    good_state = OmniState(engine=scripted_engine)
    with (
        OmniServer(bad_state) as bad,
        OmniServer(good_state) as good,
        backend(f"{bad.url},{good.url}") as client,
    ):
        images = [client.generate(ImageRequest(f"p{i}", width=16, height=16)) for i in range(4)]
    assert len(images) == 4 and len(posts(good.state)) == 4
    assert len(posts(bad.state)) == 1  # failed once, then skipped for the cooldown


def test_a_batch_runs_in_parallel_and_keeps_its_order(server: OmniServer) -> None:
    requests = [ImageRequest(f"p{i}", width=16, height=8, seed=i) for i in range(6)]
    with backend(server.url) as client:
        images = client.generate_batch(requests)
    by_prompt = {call["prompt"]: scripted_engine(call).tobytes() for call in server.state.engine_calls}
    assert [image.tobytes() for image in images] == [by_prompt[r.prompt] for r in requests]


def test_the_key_is_sent_as_a_bearer_token_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "omni-secret-token-1234"
    with OmniServer(OmniState(engine=scripted_engine, api_key=secret)) as running:
        monkeypatch.setenv("OPENAI_API_KEY", secret)
        with backend(running.url) as client:
            assert client.generate(ImageRequest("x", width=16, height=16)).size == (16, 16)
        assert posts(running.state)[0]["headers"]["authorization"] == f"Bearer {secret}"
        monkeypatch.setenv("OPENAI_API_KEY", "wrong-" + secret)
        with backend(running.url) as client, pytest.raises(BackendError) as caught:
            client.generate(ImageRequest("x", width=16, height=16))
    message = str(caught.value)
    assert "HTTP 401 from" in message and "/v1/images/generations: Unauthorized" in message
    assert "export OPENAI_API_KEY=" in message
    assert secret not in message and secret not in client.name


def test_a_reply_without_an_image_is_an_error_not_a_crash(server: OmniServer) -> None:
    server.state.odd_replies += [
        {"created": 0, "data": [{"url": "/v1/images/abc/content"}]},
        {"created": 0, "data": [{"b64_json": "bm90IGFuIGltYWdl"}]},
        {"created": 0, "data": []},
    ]
    with backend(server.url) as client:
        with pytest.raises(BackendError, match=r"without data\[0\]\.b64_json \(a URL-only reply\?\)"):
            client.generate(ImageRequest("x", width=16, height=16))
        with pytest.raises(BackendError, match=r"data\[0\]\.b64_json from .* is not an image"):
            client.generate(ImageRequest("x", width=16, height=16))
        with pytest.raises(BackendError, match=r"has no data\[0\]\.b64_json image"):
            client.generate(ImageRequest("x", width=16, height=16))


# -- pixels: the tiny FLUX.2-klein, local vs served ----------------------------------------------


@pytest.fixture(scope="module")
def tiny_generator() -> Any:
    from interleave_thinker.backends.image.diffusers_backend import DiffusersImageBackend
    from interleave_thinker.tiny.models import ensure_tiny_models

    return DiffusersImageBackend(str(ensure_tiny_models().generator), device="cpu")


@pytest.mark.slow
def test_served_pixels_equal_the_local_diffusers_backend(tiny_generator: Any) -> None:
    state = OmniState(engine=diffusers_engine(tiny_generator.pipe), model_name="tiny/FLUX.2-klein")
    source = Image.new("RGB", (64, 64), (20, 160, 90))
    calls: list[dict[str, Any]] = [
        {"prompt": "a cat", "width": 64, "height": 64, "seed": 5},
        {"prompt": "a cat", "width": 64, "height": 64, "seed": 5, "steps": 3, "guidance": 2.0},
        {"prompt": "make it night", "image": source, "width": 64, "height": 64, "seed": 105},
    ]
    with OmniServer(state) as running, backend(running.url, model=None, remote=PATIENT) as client:
        served = [client.generate(ImageRequest(**c)) for c in calls]
    local = [tiny_generator.generate(ImageRequest(**c)) for c in calls]
    for call, a, b in zip(calls, local, served, strict=True):
        assert a.size == b.size and a.tobytes() == b.tobytes(), call["prompt"]
    assert served[0].tobytes() != served[1].tobytes()  # steps and guidance did reach the pipeline
    (edit,) = [c for c in state.engine_calls if c["image"] is not None]
    assert edit["image"].tobytes() == source.tobytes()


def run_tiny(generator: str | None, out: Path, image: Path) -> dict[str, Any]:
    from interleave_thinker import Pipeline, PipelineConfig

    overrides: dict[str, Any] = {"planner": "tiny:planner", "critic": "tiny:critic"}
    overrides["agents"] = {"retry_temperature": 0.0, "max_new_tokens": 24}  # greedy on both sides
    if generator:
        overrides["generator"] = generator
    config = PipelineConfig.resolve(preset="tiny", overrides=overrides, environ={})
    with Pipeline.from_config(config) as pipe:
        pipe("<image> Continue this picture", images=[image], out_dir=out)
    return dict(json.loads((out / "trace.json").read_text()))


@pytest.mark.slow
def test_the_pipeline_through_the_served_generator_reproduces_the_local_run(
    tiny_generator: Any, tmp_path: Path
) -> None:
    image = tmp_path / "in.png"
    Image.new("RGB", (64, 64), (20, 160, 90)).save(image)
    local = run_tiny(None, tmp_path / "local", image)
    state = OmniState(engine=diffusers_engine(tiny_generator.pipe), model_name="tiny/FLUX.2-klein")
    with OmniServer(state) as running:
        served = run_tiny(f"vllm-omni:{running.url}/v1", tmp_path / "served", image)
    assert served["backends"]["generator"] == f"vllm-omni:{running.url}/v1"
    assert stable_served(served) == stable_served(
        local
    )  # same plan, replies, verdicts, prompts, seeds, attempts
    names = sorted(p.name for p in (tmp_path / "local" / "images").iterdir())
    assert len(names) >= 2 and len(state.engine_calls) == len(names) - 1  # all but the input image
    for name in names:
        with (
            Image.open(tmp_path / "local" / "images" / name) as a,
            Image.open(tmp_path / "served" / "images" / name) as b,
        ):
            assert a.tobytes() == b.tobytes(), name


@pytest.mark.slow
def test_our_serve_generator_gives_the_same_pixels_through_its_openai_routes(tiny_generator: Any) -> None:
    """``serve generator`` answering the OpenAI images API (issue 12, item 2): ``/v1/images/*`` through
    this backend, ``/edit`` through ``http:`` and ``diffusers:`` in process give identical pixels."""
    import httpx

    from interleave_thinker.backends.image.http_backend import HTTPImageBackend
    from interleave_thinker.server.generator.launcher import GeneratorProcess

    source = Image.new("RGB", (64, 64), (20, 160, 90))
    calls: list[dict[str, Any]] = [
        {"prompt": "a cat", "width": 64, "height": 64, "seed": 5, "steps": 2, "guidance": 1.0},
        {
            "prompt": "at night",
            "image": source,
            "width": 64,
            "height": 64,
            "seed": 105,
            "steps": 2,
            "guidance": 1.0,
        },
    ]
    with GeneratorProcess("tiny:generator", workers=1, device="cpu") as service:
        models = httpx.get(f"{service.url}/v1/models", timeout=30)
        assert models.status_code == 200, models.text  # the OpenAI routes answer beside /edit
        with backend(service.url, model=None, remote=PATIENT) as omni, HTTPImageBackend(service.url) as edit:
            served = [omni.generate(ImageRequest(**c)) for c in calls]
            via_edit = [edit.generate(ImageRequest(**c)) for c in calls]
    local = [tiny_generator.generate(ImageRequest(**c)) for c in calls]
    for a, b, c in zip(local, served, via_edit, strict=True):
        assert_served_pixels(a, b, "/v1/images")  # within the stated tolerance (docs/serving.md#numerics)
        assert_served_pixels(a, c, "/edit")
