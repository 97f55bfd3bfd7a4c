"""The pipeline through served backends only (`serve vlm` for planner and critic, `serve generator` for
images through its `/edit` and through its OpenAI images routes with the `vllm-omni:` backend, all real
subprocesses on 127.0.0.1) writes the same trace as the local tiny models."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.server.generator import GeneratorProcess
from tests.helpers.common import assert_served_pixels, cli_command, stable_served
from tests.helpers.served import Engine, offline_env, stop_all

pytestmark = pytest.mark.slow


def env() -> dict[str, str]:
    return {**os.environ, **offline_env()}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    logs = tmp_path_factory.mktemp("logs")
    engines = [
        Engine(
            f"serve vlm ({role})",
            cli_command("serve", "vlm", "--model", f"tiny:{role}", "--log-level", "warning"),
            logs / f"{role}.log",
            env(),
        )
        for role in ("planner", "critic")
    ]
    urls = {role: engine.url for role, engine in zip(("planner", "critic"), engines, strict=True)}
    generator = GeneratorProcess("tiny:generator", workers=1, device="cpu", env=env())
    try:
        generator.__enter__()
        urls["generator"] = generator.url
        for engine in engines:
            engine.wait_ready(within=180)
        yield urls
    finally:
        generator.__exit__(None, None, None)
        stop_all(engines)


def run(overrides: dict[str, Any], out: Path, image: Path) -> dict[str, Any]:
    # Greedy retries on both sides, so the comparison does not depend on sampling.
    config = PipelineConfig.resolve(
        preset="tiny",
        overrides={**overrides, "agents": {"retry_temperature": 0.0, "max_new_tokens": 24}},
        environ={},
    )
    with Pipeline.from_config(config) as pipe:
        pipe("<image> Continue this picture", images=[image], out_dir=out)
    return dict(json.loads((out / "trace.json").read_text()))


GENERATOR_ROUTES = {
    "http": "http:{url}",  # the service's own /edit
    "vllm-omni": "vllm-omni:{url}/v1",  # the same service through its OpenAI images routes (issue 12)
}


@pytest.mark.parametrize("route", sorted(GENERATOR_ROUTES))
def test_served_backends_reproduce_the_local_run(servers: dict[str, str], route: str, tmp_path: Path) -> None:
    image = tmp_path / "in.png"
    Image.new("RGB", (64, 64), (20, 160, 90)).save(image)
    local = run({"planner": "tiny:planner", "critic": "tiny:critic"}, tmp_path / "local", image)
    generator = GENERATOR_ROUTES[route].format(url=servers["generator"])
    served = run(
        {
            "planner": f"openai:{servers['planner']}/v1",  # model name discovered from /v1/models
            "critic": f"openai:{servers['critic']}/v1#tiny:critic",
            "generator": generator,
        },
        tmp_path / "served",
        image,
    )
    assert served["backends"]["generator"] == generator
    assert stable_served(served) == stable_served(
        local
    )  # same plan, replies, verdicts, prompts, seeds, attempts
    assert len(local["steps"][0]["attempts"]) == 3 and len(local["planner"]["raw_replies"]) == 3
    for name in sorted(p.name for p in (tmp_path / "local" / "images").iterdir()):
        with (
            Image.open(tmp_path / "local" / "images" / name) as a,
            Image.open(tmp_path / "served" / "images" / name) as b,
        ):
            assert_served_pixels(a, b, name)  # PNG is lossless; the decode may round apart by 1
