"""The GRPO reward's judge request is the release's, through the ``gemini:`` and ``openai:`` judges (issue 40).

``tests/fixtures/release_judge_requests.json`` holds the requests the release's reward builds
(``GeminiEditScorer.score`` of ``interleave_thinker_reward.py`` at commit 94c7593), captured by running
that code on the fixture images below with a recording stand-in for ``google.genai``: per request the
order of its parts, each text's and each PNG's SHA-256 (the texts are the released judge templates,
which may not be committed) and the generation config. The release passes ``[text, Part, Part]``, which
the SDK sends as one user turn with those parts in that order; ours passes that turn as a dict.

The ``openai:`` judge has no counterpart in the release: the same parts in the same order, ``max_tokens``
for ``max_output_tokens`` and no temperature is the mapping checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.vlm.gemini_backend import GeminiVLMBackend
from interleave_thinker.backends.vlm.openai_backend import OpenAIVLMBackend
from interleave_thinker.testing.doubles.openai_chat import ScriptedServer, ok
from interleave_thinker.train.grpo.config import GRPORunConfig
from interleave_thinker.train.grpo.trainer import reward_functions
from tests.conftest import shared_path
from tests.helpers.common import REPO

CAPTURED = json.loads(
    (REPO / "tests" / "fixtures" / "release_judge_requests.json").read_text(encoding="utf-8")
)
REPLY = '{"score": [7, 6], "reasoning": "ok"}'
FAST = RetrySettings(max_retries=1, backoff_base=0.01, backoff_max=0.05, timeout=30.0)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_entry(text: str) -> dict[str, Any]:
    return {"text_sha256": sha(text.encode()), "text_chars": len(text)}


def image_entry(png: bytes) -> dict[str, Any]:
    from io import BytesIO

    return {
        "image_png_sha256": sha(png),
        "mime_type": "image/png",
        "size": list(Image.open(BytesIO(png)).size),
    }


def fixture_images(case: dict[str, str]) -> tuple[Image.Image, Image.Image]:
    folder = shared_path("fixtures", "train-data", "images")
    before: Image.Image = Image.open(folder / case["before"])
    after: Image.Image = Image.open(folder / case["after"])
    if case["case"] == "sketch_to_wide":  # as captured: an "after" of another size
        after = after.convert("RGB").resize((96, 48), Image.Resampling.NEAREST)
    return before, after


def judge_of(tmp_path: Path, backend: Any) -> Any:
    """The judge the GRPO reward builds from a default config with the released templates."""
    config = GRPORunConfig.model_validate(
        {
            "role": "critic",
            "output_dir": str(tmp_path / "out"),
            "model": {"name_or_path": "tiny:critic"},
            "data": {"synthetic": 2},
            "prompts": {"folder": str(shared_path("reference", "prompts")), "download": False},
        }
    )
    _, _, closers = reward_functions(config, "critic", generator=object(), judge_backend=backend)
    scorer = closers[0]
    scorer.close()
    return scorer.judge


class RecordingModels:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    @property
    def models(self) -> RecordingModels:
        return self

    def generate_content(self, *, model: str, contents: list[Any], config: dict[str, Any]) -> Any:
        from types import SimpleNamespace

        self.calls.append({"model": model, "contents": contents, "config": config})
        return SimpleNamespace(text=REPLY, usage_metadata=None)


def gemini_requests(call: dict[str, Any]) -> dict[str, Any]:
    (turn,) = call["contents"]
    assert turn["role"] == "user"
    parts = [
        text_entry(p["text"]) if "text" in p else image_entry(p["inline_data"]["data"]) for p in turn["parts"]
    ]
    config = {k: v for k, v in call["config"].items() if k != "http_options"}  # the SDK's transport option
    return {"model": call["model"], "parts": parts, "config": config}


def test_the_gemini_judge_sends_the_releases_requests(tmp_path: Path) -> None:
    client = RecordingModels()
    backend = GeminiVLMBackend("gemini-2.5-pro", client=client, retry=FAST)
    judge = judge_of(tmp_path, backend)
    for case in CAPTURED["cases"]:
        before, after = fixture_images(case)
        assert judge.judge(before, after, case["instruction"]).ok
    sent = [gemini_requests(call) for call in client.calls]
    expected = [{k: r[k] for k in ("model", "parts", "config")} for r in CAPTURED["requests"]]
    assert sent == expected  # text first, then the images; max_output_tokens 4096 and no temperature
    backend.close()


def test_the_openai_judge_sends_the_same_parts_with_max_tokens_and_no_temperature(tmp_path: Path) -> None:
    with ScriptedServer(lambda _i, _call: ok(REPLY)) as server:
        backend = OpenAIVLMBackend([server.url], "judge", retry=FAST)
        judge = judge_of(tmp_path, backend)
        for case in CAPTURED["cases"]:
            before, after = fixture_images(case)
            assert judge.judge(before, after, case["instruction"]).ok
        bodies = [call.body for call in server.posts()]
        backend.close()
    assert [openai_request(body) for body in bodies] == OPENAI_EXPECTED


def openai_request(body: dict[str, Any]) -> dict[str, Any]:
    """An ``openai:`` judge's request body as the captured requests are written."""
    (turn,) = body["messages"]
    parts = [
        text_entry(p["text"])
        if p["type"] == "text"
        else image_entry(base64.b64decode(p["image_url"]["url"].partition(",")[2]))
        for p in turn["content"]
    ]
    return {"parts": parts, "max_tokens": body["max_tokens"], "temperature": body.get("temperature")}


OPENAI_EXPECTED = [
    {"parts": r["parts"], "max_tokens": r["config"]["max_output_tokens"], "temperature": None}
    for r in CAPTURED["requests"]
]


def test_the_reward_command_sends_the_same_requests(tmp_path: Path) -> None:
    """``interleave-thinker reward`` builds its judge as GRPO's reward does: one row per captured case
    (recorded attempt failed, so the refined prompt is regenerated), the served generator answering with
    the case's "after" image and the ``openai:`` judge recording what it is sent."""
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app
    from interleave_thinker.testing.doubles.generator import ScriptedEditServer, png_b64

    shutil.copytree(shared_path("fixtures", "train-data", "images"), tmp_path / "images")
    rows, replies = [], []
    for case in CAPTURED["cases"]:
        refined = f"redo {case['case']}"  # one regeneration per case (same prompt and "before": one, cached)
        reply = f"<think>no</think><answer>{{'previous_step_success': False, 'refine_prompt': '{refined}'}}</answer>"
        truth = {"success": False, "semantics": 5, "quality": 5}
        rows.append({"response": reply, "ground_truth": truth, "origin_prompt": case["instruction"],
                     "origin_image_path": f"images/{case['before']}", "previous_prompt": case["case"]})  # fmt: skip
        before, after = fixture_images(case)
        before.close()
        replies.append((200, {"success": True, "edited_image": png_b64(after)}))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    folder = shared_path("reference", "prompts")
    (tmp_path / "settings.yaml").write_text(f"prompts:\n  folder: {folder}\n  download: false\n")
    generator = ScriptedEditServer(script=replies)
    with ScriptedServer(lambda _i, _call: ok(REPLY)) as judge:
        args = ["reward", "--input", str(tmp_path / "rows.jsonl"), "--out", str(tmp_path / "out.jsonl"),
                "--generator", f"http:{generator.url}", "--judge", f"openai:{judge.url}#judge",
                "--sample-concurrency", "1", "--config", str(tmp_path / "settings.yaml")]  # fmt: skip
        result = CliRunner().invoke(app, args)
        bodies = [call.body for call in judge.posts()]
    generator.close()
    assert result.exit_code == 0, result.output
    order = json.dumps  # SC and PQ of one row are asked at once: compare as multisets
    assert sorted(map(order, map(openai_request, bodies))) == sorted(map(order, OPENAI_EXPECTED))


@pytest.mark.parametrize(
    ("sets", "first", "temperature", "tokens"),
    [
        ((), "text", None, 4096),
        (("reward.judge_text_first=false", "reward.judge_decoding=greedy"), "image", 0.0, 4096),
    ],
)
def test_the_reward_keys_choose_the_request(
    tmp_path: Path, sets: tuple[str, ...], first: str, temperature: float | None, tokens: int
) -> None:
    """``reward.judge_text_first: false`` and ``judge_decoding: greedy`` restore the earlier request."""
    config = GRPORunConfig.load(REPO / "configs" / "grpo_critic.yaml", sets=sets)
    client = RecordingModels()
    backend = GeminiVLMBackend("gemini-2.5-pro", client=client, retry=FAST)
    _, _, closers = reward_functions(config, "critic", generator=object(), judge_backend=backend)
    judge = closers[0].judge
    closers[0].close()
    judge.quality(Image.new("RGB", (16, 16), "red"))
    (call,) = client.calls
    assert next(iter(call["contents"][0]["parts"][0])) == ("text" if first == "text" else "inline_data")
    assert call["config"].get("temperature") == temperature
    assert call["config"]["max_output_tokens"] == tokens
    assert (judge.retry.max_attempts, closers[0].size) == (5, (1024, 1024))
