"""The data engine end to end on CPU: a 4-domain taxonomy -> `data prompts` (48) -> `data generate` (SIGKILLed
once, resumed) -> `data build` -> `train sft` on the tiny critic -> `data export` in both formats.

Teachers answer by rule (the reply depends only on the request, so a resumed run gets the same answers): the
prompt teacher behind the Gemini SDK double, planner, critic and judge behind one OpenAI-compatible chat
server on 127.0.0.1; the generator is the tiny FLUX.2-klein (`tiny:generator`), real diffusion at toy size.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.agents.critic import parse_verdict
from interleave_thinker.cli.main import app
from interleave_thinker.datagen.usage_ledger import recorded_usage
from interleave_thinker.testing.doubles.gemini_sdk import install_genai_client
from interleave_thinker.train.data.loaders import load_sft
from tests.helpers.common import REPO
from tests.helpers.datagen import (
    BATCH,
    COUNT,
    LOOP,
    SUB,
    WORDS,
    Teachers,
    lexicon_reply,
    records,
    taxonomy_file,
)

PER_SUB = 4  # 4 domains x 3 sub-categories x 4 = 48 prompts
SUBSET = 8  # the uninterrupted reference run covers the first 8 prompts (full identity: the resume test)


def request_prompt(sub: str, batch: int, i: int) -> str:
    """Distinct words, and a plan marker the planner reads: 1 or 2 steps, a third of first steps 'hard'."""
    digest = hashlib.sha256(f"{sub}|{batch}|{i}".encode()).digest()
    w = [WORDS[b % len(WORDS)] for b in digest[:8]]
    first = f"{w[4]} {w[5]}" + (" hard" if digest[8] % 3 == 0 else "")
    steps = first if digest[9] % 2 else f"{first}; {w[6]} {w[7]}"
    return f"Show how the {w[0]} {w[1]} meets the {w[2]} {w[3]} [[{steps}]]"


def teacher_reply(text: str) -> str | None:
    """The prompt teacher of `data prompts`: a lexicon, or a batch of prompts; None for other requests."""
    sub = SUB.search(text)
    if sub is None:
        return None
    batch_match = BATCH.search(text)
    if batch_match is None:
        return lexicon_reply(sub.group(1))
    batch, count = int(batch_match.group(1)), int(COUNT.search(text).group(1))  # type: ignore[union-attr]
    prompts = [request_prompt(sub.group(1), batch, i) for i in range(count)]
    return "<answer>" + json.dumps({"prompts": prompts}) + "</answer>"


class Engine(Teachers):
    """The scripted chat server of test_data_generate (planner, critic, judge), and the prompt teacher
    behind the Gemini SDK double (the teacher presets' Gemini; the SDK is not installed in CI)."""

    def client(self, api_key: str, http_options: dict[str, Any]) -> Any:
        """``google.genai.Client(api_key=, http_options=)``: ``models.generate_content`` answers."""

        def generate_content(*, model: str, contents: list[Any], config: dict[str, Any]) -> Any:
            assert model == "gemini-2.5-pro" and api_key == "test-key"
            text = "".join(p.get("text", "") for c in contents for p in c["parts"])
            reply = teacher_reply(text)
            assert reply is not None, text[:200]
            meta = SimpleNamespace(prompt_token_count=len(text) // 4, candidates_token_count=len(reply) // 4)
            with self.lock:
                tokens = {"prompt_tokens": len(text) // 4, "completion_tokens": len(reply) // 4}
                self.log.append({"role": "prompter", "usage": tokens, "answered": True})
            return SimpleNamespace(text=reply, usage_metadata=meta)

        return SimpleNamespace(models=SimpleNamespace(generate_content=generate_content))


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})
    assert result.exit_code == 0, result.output
    return result.output


def generate(config: Path, prompts: Path, out: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "interleave_thinker", "data", "generate", "--config", str(config)]
    return [*command, "--input", str(prompts), "--out", str(out), "--concurrency", "2", "--quiet", *extra]


def kill_midway(command: list[str], teachers: Engine, env: dict[str, str]) -> list[dict[str, Any]]:
    """Start the run; once it has made some chat calls, hold the replies and SIGKILL it when both requests
    in flight wait on a held call (so no call is between its sending and its count); the calls the
    server saw from it, the held ones included."""
    mark = len(teachers.log)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while len(teachers.log) - mark < 60 and proc.poll() is None:
            time.sleep(0.005)
        teachers.hold()
        deadline = time.monotonic() + 60
        while teachers.held(mark) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        teachers.release()
    assert teachers.held(mark) == 2  # killed while each of its two requests waited on a call
    return teachers.log[mark:]


def server_counts(log: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per chat role, what the server saw: calls and images sent, tokens of the replies it gave."""
    answered = [e for e in log if e["answered"]]
    return {
        role: {
            "calls": sum(e["role"] == role for e in log),
            "images_in": sum(e["images"] for e in log if e["role"] == role),
            "input_tokens": sum(e["usage"]["prompt_tokens"] for e in answered if e["role"] == role),
            "output_tokens": sum(e["usage"]["completion_tokens"] for e in answered if e["role"] == role),
        }
        for role in ("planner", "critic", "judge")
    }


def chat_usage(usage: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    names = ("calls", "images_in", "input_tokens", "output_tokens")
    return {role: {n: usage[role][n] for n in names} for role in ("planner", "critic", "judge")}


def minus(total: dict[str, dict[str, int]], part: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {role: {n: v - part[role][n] for n, v in counts.items()} for role, counts in total.items()}


def roles(log: list[dict[str, Any]]) -> Counter[str]:
    return Counter(entry["role"] for entry in log)


@pytest.mark.slow
def test_taxonomy_to_trained_critic_and_corpora(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    teachers = Engine()
    install_genai_client(monkeypatch, teachers.client)
    try:
        prompts = write_prompts(teachers, tmp_path)
        runs = generate_killed_and_resumed(teachers, prompts, tmp_path)
        check_built_trained_and_exported(runs, tmp_path)
    finally:
        teachers.server.close()


def write_prompts(teachers: Engine, tmp_path: Path) -> Path:
    """`data prompts` with a Gemini teacher: 4 domains x 3 sub-categories x 4 prompts."""
    prompts = tmp_path / "prompts.jsonl"
    tax = taxonomy_file(tmp_path / "taxonomy.yaml", domains=4, subs=3)
    cli("data", "prompts", "--taxonomy", str(tax), "--out", str(prompts), "--llm", "gemini:gemini-2.5-pro",
        "--per-subcategory", str(PER_SUB), "--quiet", env={"GEMINI_API_KEY": "test-key"})  # fmt: skip
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert len(rows) == 48 and len({r["id"] for r in rows}) == 48
    assert roles(teachers.log) == {"prompter": 12 * 2}  # per sub-category: one lexicon, one batch
    summary = json.loads((tmp_path / "prompts.jsonl.teacher" / "summary.json").read_text())
    assert (summary["teacher_calls"], summary["written"]) == (24, 48)
    # The tokens the Gemini replies carried, as the double reported them, reach the summary.
    tokens = [sum(e["usage"][k] for e in teachers.log) for k in ("prompt_tokens", "completion_tokens")]
    assert [summary["teacher_input_tokens"], summary["teacher_output_tokens"]] == tokens and min(tokens) > 0
    return prompts


def generate_killed_and_resumed(teachers: Engine, prompts: Path, tmp_path: Path) -> Path:
    """`data generate` SIGKILLed once mid-run and resumed, and an uninterrupted run of a subset."""
    chat = f"openai:{teachers.url}#teacher"
    settings: dict[str, Any] = dict(
        preset="tiny", planner=chat, critic=chat, judge=chat, generator="tiny:generator"
    )
    settings |= {"loop": LOOP, "generation": {"width": 64, "height": 64, "steps": 2}}
    config = tmp_path / "teacher.json"
    config.write_text(json.dumps(settings), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    runs, reference = tmp_path / "runs", tmp_path / "reference"
    killed_log = kill_midway(generate(config, prompts, runs), teachers, env)
    assert 0 < len(killed_log) < 48 * 4  # killed mid-run
    killed = recorded_usage(runs)  # the killed run's counts, on disk as its calls were made
    assert chat_usage(killed) == server_counts(killed_log)
    assert killed["generator"]["calls"] == killed["generator"]["images_out"] > 0  # no image call cut short
    mark = len(teachers.log)
    resumed = subprocess.run(generate(config, prompts, runs), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    resumed_log = teachers.log[mark:]
    mark = len(teachers.log)
    command = generate(config, prompts, reference, "--limit", str(SUBSET))
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=300)
    reference_log = teachers.log[mark:]
    final, expected = records(runs), records(reference)
    assert len(final) == 48 and len(expected) == SUBSET
    assert {k: final[k] for k in expected} == expected  # traces without times, and execution records
    check_counts(runs, killed, killed_log, resumed_log)
    reference_usage = json.loads((reference / "summary.json").read_text())["usage"]
    check_run_counts(reference_usage, reference_log)
    assert 0 < roles(resumed_log)["planner"] < 48  # the resumed run did not plan the finished requests again
    attempts = sum(len(s["attempts"]) for trace, _ in expected.values() for s in trace["steps"])
    assert reference_usage["generator"]["calls"] == attempts
    return runs


def check_counts(
    runs: Path,
    killed: dict[str, dict[str, int]],
    killed_log: list[dict[str, Any]],
    resumed_log: list[dict[str, Any]],
) -> None:
    """The resumed run's summary counts every call the server saw from both runs (the killed one's too)."""
    total = json.loads((runs / "summary.json").read_text())["usage"]
    assert total == recorded_usage(runs)
    assert chat_usage(total) == server_counts(killed_log + resumed_log)
    # ... and, without the killed run's counts, the calls the server saw in the resumed run.
    check_run_counts(minus(total, killed), resumed_log)


def check_run_counts(usage: dict[str, dict[str, int]], log: list[dict[str, Any]]) -> None:
    """One uninterrupted run's counts: the calls the server saw, and one critic and two judge calls per image."""
    seen = roles(log)
    assert {r: usage[r]["calls"] for r in ("planner", "critic", "judge")} == {
        r: seen[r] for r in ("planner", "critic", "judge")
    }
    assert chat_usage(usage) == server_counts(log)
    assert usage["judge"]["calls"] == 2 * usage["generator"]["calls"] == 2 * usage["critic"]["calls"]
    tokens = sum(e["usage"]["prompt_tokens"] for e in log if e["role"] == "critic")
    assert usage["critic"]["input_tokens"] == tokens


def check_built_trained_and_exported(runs: Path, tmp_path: Path) -> None:
    # 3. data build reads the scores the run recorded (no judge) and writes critic SFT examples.
    built = tmp_path / "built"
    cli("data", "build", "--input", str(runs), "--out", str(built), "--preset", "tiny")
    critic = load_sft(built / "critic_sft.json", role="critic")
    labels = Counter(parse_verdict(e.messages[-1].content).success for e in critic)
    assert len(critic) >= 4 and all(e.images for e in critic) and labels[True] == labels[False]

    # 4. train sft on the tiny critic for a few steps: the logged loss falls.
    trained = tmp_path / "critic"
    sets = ["data.train=[" + str(built / "critic_sft.json") + "]", "training.max_steps=6"]
    sets += ["training.logging_steps=1", "training.save_steps=6", "training.warmup_ratio=0.0"]
    args = ["train", "sft", "--config", str(REPO / "configs" / "sft_critic_tiny.yaml"), "--out", str(trained)]
    output = cli(*args, *[x for s in sets for x in ("--set", s)])
    assert "trained 6 steps" in output
    history = json.loads((trained / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 6 and losses[-1] < losses[0]

    # 5. data export in both formats: every record readable by our loader and by datasets.
    import datasets

    corpus = tmp_path / "corpus"
    for name in ("interleaved_easy", "interleaved_hard"):
        fmt = name.replace("_", "-")
        cli("data", "export", "--from", str(runs), "--format", fmt, "--out", str(corpus), "--quiet")
        stats = json.loads((corpus / f"{name}_stats.json").read_text())
        kept = load_sft(corpus / f"{name}.json")
        assert stats["runs"] == 48 and stats["kept"] == len(kept) > 0
        assert len(datasets.load_from_disk(str(corpus / "trl" / name))) == len(kept)
        markers = [e.messages[-1].content.count("<image>") for e in kept]
        assert markers == [len(e.images) for e in kept]
    easy = load_sft(corpus / "interleaved_easy.json")
    hard = load_sft(corpus / "interleaved_hard.json")
    # hard keeps the failed attempts of the 'hard' steps: more images than easy, one critic block each.
    assert sum(len(e.images) for e in hard) > sum(len(e.images) for e in easy)
    assert all(e.messages[-1].content.count("<critic>") == len(e.images) for e in hard)
