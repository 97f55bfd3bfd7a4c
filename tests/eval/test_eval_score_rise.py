"""`eval score rise` against a scripted judge over real HTTP: judge selection, JPEG thumbnails, the
``Final Score`` regex, score and accuracy per category under both scorer versions."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.benchmarks.rise import scorer as score_rise
from interleave_thinker.eval.score_run import ScoreOptions, run_score
from interleave_thinker.testing.doubles.judge import judge_server
from tests.conftest import shared_path
from tests.helpers.rise import SAMPLES, _dataset


def _t(name: str) -> str:
    return shared_path("reference", "eval", f"rise_prompt_{name}.txt").read_bytes().decode("utf-8")


def jpeg_url(path: Path) -> str:
    """The official encoding, written out independently: RGB for RGBA/P, 768 thumbnail, JPEG defaults."""
    image: Image.Image = Image.open(path)
    if image.mode in ("RGBA", "P"):
        image = image.convert("RGB")
    image.thumbnail((768, 768))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(autouse=True)
def eval_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))


@pytest.mark.parametrize(
    ("reply", "numbers"),
    [
        ("**Final Score:** **4**", [4]),
        ("Final Score: 5/5", [5]),
        ("Final Score:\n\n**5**", [5]),
        ("final score: 3, 4", [3, 4]),
        ("Final Score: 2\nblah\nFinal Score: 5", [2]),
        ("Final Score: **X**", None),
        ("Final Score - 5", None),
        ("Final Scores: 3", [3]),  # "Final Score" matches without numbers, then "Final Scores" gives them
        ("no score", None),
    ],
)
def test_final_score_regex(reply: str, numbers: list[int] | None) -> None:
    assert score_rise.extract(reply) == numbers
    if numbers is None:
        with pytest.raises(ValueError):
            score_rise.parse_judge(reply)
    else:
        assert score_rise.parse_judge(reply) == numbers


def test_jpeg_thumbnail_encoding(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    Image.new("RGBA", (1000, 500), (10, 200, 30, 7)).save(path)
    encoded = score_rise.encode_image(path)
    assert (encoded.mime, encoded.detail) == ("image/jpeg", "high")
    assert encoded.data_url() == jpeg_url(path)
    decoded = Image.open(io.BytesIO(encoded.data))
    assert (decoded.format, decoded.mode, decoded.size) == ("JPEG", "RGB", (768, 384))


def _expected(data: Path, outputs: Path) -> dict[str, tuple[str, str]]:
    """Messages (JSON) of every official request -> (index, role), built from the official calls."""
    out: dict[str, tuple[str, str]] = {}
    for index, category, extra, _ in SAMPLES:
        if index == "c2":
            continue
        instruct, ref = f"INSTR {index}", extra.get("reference")
        img1, img2 = data / f"{index}.png", next((outputs / "images" / category).glob(f"{index}.*"))
        if category == "temporal_reasoning" or category == "causal_reasoning":
            judges = {"consistency": (_t("consist").format(instruct=instruct), [img1, img2]),
                      "reasoning": (_t("reasoning").format(instruct=instruct, reference=ref), [img2]),
                      "quality": (_t("generation"), [img2])}  # fmt: skip
        elif category == "spatial_reasoning":
            rea = (
                (_t("spatial_ref_w_input").format(instruct=instruct, reference=ref), [img1, img2])
                if extra.get("reasoning_img")
                else (_t("spatial_ref").format(instruct=instruct, reference=ref), [img2])
            )
            judges = {"consistency": (_t("spatial_cons").format(instruct=instruct), [img1, img2]),
                      "reasoning": rea, "quality": (_t("spatial_qual"), [img2])}  # fmt: skip
        elif extra.get("reference_txt"):
            r = extra["reference_txt"]
            judges = {"consistency": (_t("logical_cons_ans").format(instruct=instruct, reference=r), [img1, img2]),
                      "reasoning": (_t("logical_txt").format(instruct=instruct, reference=r), [img2])}  # fmt: skip
        else:
            refimg = data / extra["reference_img"]
            judges = {"consistency": (_t("logical_cons").format(instruct=instruct), [refimg, img2]),
                      "reasoning": (_t("logical_img").format(instruct=instruct), [refimg, img2])}  # fmt: skip
        if "consistency_free" in extra:
            judges.pop("consistency")
        for role, (text, images) in judges.items():
            content = [{"type": "text", "text": text}] + [
                {"type": "image_url", "image_url": {"url": jpeg_url(p), "detail": "high"}} for p in images
            ]
            out[json.dumps([{"role": "user", "content": content}])] = (index, role)
    return out


def test_rise_scores_every_category_both_versions(tmp_path: Path) -> None:
    data, outputs = _dataset(tmp_path)
    expected = _expected(data, outputs)
    replies = {index: r for index, _, _, r in SAMPLES}
    unexpected: list[Any] = []

    def script(body: dict[str, Any]) -> str:
        key = expected.get(json.dumps(body["messages"]))
        if key is None:
            unexpected.append(body)
            return "unexpected"
        assert list(body) == ["model", "messages", "max_tokens", "n", "temperature"]
        assert (body["max_tokens"], body["n"], body["temperature"]) == (4096, 1, 0)
        return replies[key[0]][key[1]]

    with judge_server(script) as server:
        judge = f"openai:{server.url}#gpt-4.1-2025-04-14"
        options = dict(protocol="rise", outputs=outputs, data=str(data / "data.json"), judge=judge,
                       judge_cache=tmp_path / "cache")  # fmt: skip
        current = run_score(ScoreOptions(out=tmp_path / "cur", **options))  # type: ignore[arg-type]
        assert unexpected == []
        assert server.calls == len(expected) == 17
        pre = run_score(ScoreOptions(out=tmp_path / "pre", scorer_version="pre-2026-04-13", **options))  # type: ignore[arg-type]
        assert server.calls == 17 and pre["judge_calls"] == {"this_run": 0, "cache_hits": 17}

    cats = current["categories"]
    assert cats["Temporal"]["score"] == 5.0 and cats["Temporal"]["accuracy"] == 0.5  # t2 failed: 0, kept
    assert cats["Causal"]["score"] == 5.0 and cats["Causal"]["accuracy"] == 0.5  # c1 free, c2 missing
    assert cats["Spatial"]["score"] == 1.0 and cats["Spatial"]["accuracy"] == 0.5  # s1 halved to 1; s2 NaN
    assert cats["Logical"]["score"] == pytest.approx(3.05) and cats["Logical"]["accuracy"] == 0.5
    assert current["overall"]["score"] == pytest.approx((5 + 5 + 1 + 1.1 + 5) / 5)
    assert current["overall"]["accuracy"] == 0.5
    assert current["overall"]["score_percentage"] == pytest.approx(25 * ((5 + 5 + 1 + 1.1 + 5) / 5 - 1))
    assert current["counts"] == {"items": 8, "scored": 6, "failed": 1, "missing_outputs": 1}
    # before the fix, consistency-free samples were never accurate; scores are unchanged
    assert pre["overall"]["accuracy"] == 0.25
    assert pre["categories"]["Causal"]["accuracy"] == 0.0 and pre["categories"]["Spatial"]["accuracy"] == 0.0
    assert pre["overall"]["score"] == current["overall"]["score"]
    assert pre["scorer_version"] == "pre-2026-04-13" and current["scorer_version"] == "current"

    rows = {
        json.loads(x)["id"]: json.loads(x)
        for x in (tmp_path / "cur" / "scores.jsonl").read_text().splitlines()
    }
    assert rows["t1"]["score"] == 5.0  # the data has consistency_free, so NaN counts as true: 0.2*VP + 0.8*R
    assert (rows["l1"]["ApprConsistency"], rows["l1"]["Reasoning"], rows["l1"]["score"]) == (
        5,
        1,
        pytest.approx(1.1),
    )
    assert (rows["l2"]["ApprConsistency"], rows["l2"]["Reasoning"], rows["l2"]["score"]) == (5, 5, 5.0)
    assert rows["s2"]["score"] is None and rows["s2"]["accuracy"] == 1
    assert rows["c1"]["ApprConsistency"] is None and rows["c1"]["accuracy"] == 1
    assert rows["t2"]["status"] == "failed" and rows["t2"]["replies"]["reasoning"] == ["Final Score: **X**"]
    assert rows["c2"]["status"] == "missing"


def test_rise_shared_samples(tmp_path: Path) -> None:
    """The 64-sample format (no subtask/reasoning_img/consistency_free): reference images go to both judges."""
    data = shared_path("benchmarks", "risebench")
    items = json.loads((data / "data_sample.json").read_text("utf-8"))
    outputs = tmp_path / "run"
    for number, item in enumerate(items):
        folder = outputs / "images" / item["category"]
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 40), (number * 40, 0, 0)).save(folder / f"{item['index']}.png")
    bodies: list[dict[str, Any]] = []

    def script(body: dict[str, Any]) -> str:
        bodies.append(body)
        return "Final Score: 5"

    with judge_server(script) as server:
        summary = run_score(
            ScoreOptions("rise", outputs, str(data), f"openai:{server.url}#x", tmp_path / "o")
        )
        assert server.calls == 3 * 3 + 3 * 2
    assert summary["overall"]["accuracy"] == 1.0 and summary["overall"]["score"] == 5.0
    logical = next(i for i in items if i["index"] == "logical_reasoning_14")
    ref_url = jpeg_url(data / logical["reference_img"])
    texts = {
        _t("logical_cons").format(instruct=logical["instruction"]),
        _t("logical_img").format(instruct=logical["instruction"]),
    }
    sent = [b for b in bodies if b["messages"][0]["content"][0]["text"] in texts]
    assert len(sent) == 2 and all(b["messages"][0]["content"][1]["image_url"]["url"] == ref_url for b in sent)


def test_unreadable_output_fails_the_sample_and_bad_data_fails_first(tmp_path: Path) -> None:
    data, outputs = _dataset(tmp_path)
    (outputs / "images" / "temporal_reasoning" / "t1.png").write_bytes(b"not an image")
    with judge_server(lambda body: "Final Score: 5") as server:
        judge = f"openai:{server.url}#x"
        summary = run_score(ScoreOptions("rise", outputs, str(data / "data.json"), judge, tmp_path / "o"))
        assert server.calls == 17 - 3  # t1 is never asked
        assert summary["counts"] == {"items": 8, "scored": 6, "failed": 1, "missing_outputs": 1}
        records = json.loads((data / "data.json").read_text())
        records[0]["category"] = "musical_reasoning"
        (data / "data.json").write_text(json.dumps(records))
        with pytest.raises(InputError, match="musical_reasoning"):
            run_score(ScoreOptions("rise", outputs, str(data / "data.json"), judge, tmp_path / "p"))
        assert server.calls == 14
