from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from interleave_thinker.agents.critic import critic_messages
from interleave_thinker.agents.messages import fill, white_canvas
from interleave_thinker.agents.planner import MANY_IMAGES_MAX_PIXELS, planner_messages
from interleave_thinker.backends._images import apply_max_pixels, bound_pixels
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.prompt_store import TemplateSet, TemplateStore


@pytest.fixture
def released(prompts_dir: Path) -> TemplateSet:
    return TemplateStore(folder=prompts_dir, download=False).load()


def images(n: int) -> list[Image.Image]:
    return [Image.new("RGB", (40 + i, 30), (i, i, i)) for i in range(n)]


def test_fill_is_plain_replacement(prompts_dir: Path) -> None:
    text = "Draw {a cat} with {braces} and 'quotes' \\n <image>"
    for name, key in [("planner_narrative", "text_input"), ("planner_guidance", "text_input")]:
        raw = (prompts_dir / f"{name}.txt").read_bytes().decode("utf-8")
        assert fill(raw, **{key: text}).encode() == raw.replace("{" + key + "}", text).encode()
    raw = (prompts_dir / "critic.txt").read_bytes().decode("utf-8")
    expected = raw.replace("{original_instruction}", "orig {x}").replace("{rewritten_prompt}", "")
    assert fill(raw, original_instruction="orig {x}", rewritten_prompt="") == expected


def test_narrative_message(released: TemplateSet, prompts_dir: Path) -> None:
    request = "Show how a seed grows both visually and textually"
    messages = planner_messages(released, request, [])
    raw = (prompts_dir / "planner_narrative.txt").read_text(encoding="utf-8")
    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": raw.replace("{text_input}", "Show how a seed grows")}],
        }
    ]


def test_guidance_message_splits_on_image_markers(released: TemplateSet, prompts_dir: Path) -> None:
    imgs = images(2)
    messages = planner_messages(released, "Before: <image> after: <IMAGE> what next?", imgs)
    content = messages[0]["content"]
    raw = (prompts_dir / "planner_guidance.txt").read_text(encoding="utf-8")
    head, tail = raw.split("{text_input}")
    assert [p["type"] for p in content] == ["text", "image", "text", "image", "text"]
    assert content[0]["text"] == head + "Before: "
    assert content[1]["image"] is imgs[0] and content[3]["image"] is imgs[1]
    assert content[2]["text"] == " after: "
    assert content[4]["text"] == " what next?" + tail
    assert all("max_pixels" not in p for p in content)


def test_guidance_with_five_or_more_images_bounds_each(released: TemplateSet) -> None:
    """When asked (``agents.many_images_max_pixels``); by default not, as the release's transformers runs it."""
    for n in (5, 6):
        text = "".join(f"frame {i} <image> " for i in range(n)) + "continue"
        unbounded = planner_messages(released, text, images(n))[0]["content"]
        assert all("max_pixels" not in p for p in unbounded)
        content = planner_messages(released, text, images(n), MANY_IMAGES_MAX_PIXELS)[0]["content"]
        image_parts = [p for p in content if p["type"] == "image"]
        assert len(image_parts) == n
        assert all(p["max_pixels"] == MANY_IMAGES_MAX_PIXELS == 147456 for p in image_parts)
    four = planner_messages(released, "<image>" * 4 + "go", images(4), MANY_IMAGES_MAX_PIXELS)[0]["content"]
    assert all("max_pixels" not in p for p in four)
    # a leading marker yields an image first (the empty text piece is dropped)
    assert four[0]["type"] == "text" and four[1]["type"] == "image" and four[4]["type"] == "image"


def test_guidance_marker_mismatch_is_an_input_error(released: TemplateSet) -> None:
    with pytest.raises(InputError, match="2 <image> marker"):
        planner_messages(released, "<image> and <image>", images(1))
    with pytest.raises(InputError, match=r"1 <image> marker.*3 image"):
        planner_messages(released, "<image> only", images(3))


def test_critic_message_order(released: TemplateSet, prompts_dir: Path) -> None:
    before, after = images(2)
    messages = critic_messages(
        released, before=before, after=after, original_instruction="A cat", rewritten_prompt="A tabby cat"
    )
    content = messages[0]["content"]
    assert [p["type"] for p in content] == ["image", "image", "text"]
    assert content[0]["image"] is before and content[1]["image"] is after
    raw = (prompts_dir / "critic.txt").read_text(encoding="utf-8")
    assert content[2]["text"] == raw.replace("{original_instruction}", "A cat").replace(
        "{rewritten_prompt}", "A tabby cat"
    )


def test_white_canvas() -> None:
    canvas = white_canvas()
    assert canvas.size == (1024, 1024) and canvas.mode == "RGB"
    assert canvas.getextrema() == ((255, 255), (255, 255), (255, 255))


def test_bound_pixels_follows_the_max_pixels_rule() -> None:
    big = Image.new("RGB", (1024, 768))
    small = bound_pixels(big, MANY_IMAGES_MAX_PIXELS)
    assert small.width * small.height <= MANY_IMAGES_MAX_PIXELS
    assert small.width % 32 == 0 and small.height % 32 == 0
    assert abs(small.width / small.height - 1024 / 768) < 0.1
    assert bound_pixels(Image.new("RGB", (100, 100)), MANY_IMAGES_MAX_PIXELS).size == (100, 100)
    bounded = apply_max_pixels(
        [{"role": "user", "content": [{"type": "image", "image": big, "max_pixels": 147456}]}]
    )
    assert "max_pixels" not in bounded[0]["content"][0]
    assert bounded[0]["content"][0]["image"].size == small.size
