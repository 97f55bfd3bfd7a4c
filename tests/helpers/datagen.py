"""The data engine's test set-ups: the teachers' chat server, a loop config, a taxonomy, lexicon replies."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

import yaml

from interleave_thinker.backends.encoding import decode_base64_image
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request
from tests.helpers.common import stable

BUDGET = 4
LOOP = {"critic_on_last_attempt": True, "generator_budget": BUDGET, "first_rewritten_prompt": "empty"}


def parts(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The last message's text and image data URLs, as the chat-completions body carries them."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content, []
    text = "".join(p.get("text", "") for p in content)
    return text, [p["image_url"]["url"] for p in content if "image_url" in p]


def plan_reply(text: str) -> str:
    """Steps from the request's ``[[a; b]]``: each part one step, its prompt the part itself; a request
    saying ``no-think`` gets the plan without a ``<think>`` block."""
    found = re.search(r"\[\[(.*?)\]\]", text)
    assert found, text[:200]
    parts = [p.strip() for p in found.group(1).split(";")]
    items = ", ".join(
        f"{{'step_number': {i}, 'step_name': 'S{i}', 'instruction': {p!r}, 'prompt': {p!r}, 'auxiliary_text': None}}"
        for i, p in enumerate(parts, start=1)
    )
    answer = f"<answer>{{'execution_plan': [{items}]}}</answer>"
    return answer if "no-think" in text else f"<think>plan for {len(parts)}</think>{answer}"


def critic_reply(original: str, rewritten: str) -> str:
    """'never' steps always fail; 'hard' steps fail until the prompt was refined; the rest succeed."""
    ok = "never" not in original and ("hard" not in original or rewritten.endswith("refined"))
    refine = original + " refined"
    return f"<think>critic on {rewritten!r}</think><answer>{{'previous_step_success': {ok}, 'refine_prompt': {refine!r}}}</answer>"


def judge_scores(urls: list[str]) -> tuple[int, int]:
    """SC and PQ both from the after image (the last one), so each attempt scores its own."""
    value = int(hashlib.sha256(urls[-1].encode()).hexdigest()[:8], 16)
    return value % 11, value // 11 % 11


class Teachers:
    """The chat server; every call logged as (role, details, usage, answered) for the tests to count.

    :meth:`hold` keeps the replies of the calls that arrive from then on (logged with ``answered``
    False) until :meth:`release`: a test kills its client while every request waits on a held call."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._held: threading.Event | None = None
        self.server = LocalServer(self.handle).start()
        self.url = f"{self.server.url}/v1"

    def hold(self) -> None:
        with self.lock:
            self._held = threading.Event()

    def release(self) -> None:
        """Answer no held call (its client is gone): end their handlers; the next calls are answered."""
        with self.lock:
            held, self._held = self._held, None
        if held is not None:
            held.set()

    def held(self, start: int = 0) -> int:
        with self.lock:
            return sum(not entry["answered"] for entry in self.log[start:])

    def handle(self, request: Request) -> Reply | None:
        if request.method == "GET":
            return Reply(body={"object": "list", "data": [{"id": "teacher", "object": "model"}]})
        body = request.json()
        text, urls = parts(body)
        entry: dict[str, Any] = {"images": len(urls)}
        if "User request:" in text or "You plan picture-making work" in text:
            entry.update(role="planner", text=text)
            reply = plan_reply(text)
        elif "meant to achieve" in text:
            original = re.search(r'meant to achieve: "(.*?)"\n', text, re.DOTALL)
            rewritten = re.search(r'rely only on the line above\): "(.*?)"\n', text, re.DOTALL)
            assert original and rewritten
            entry.update(role="critic", original=original.group(1), rewritten=rewritten.group(1))
            reply = critic_reply(original.group(1), rewritten.group(1))
        elif not urls:  # any other chat call (the preflight's one line): a served model answers it too
            entry.update(role="other", text=text)
            reply = "ready"
        else:
            sc, pq = judge_scores(urls)
            score = sc if len(urls) == 2 else pq
            sizes = [decode_base64_image(u.split(",", 1)[1]).size for u in urls]
            entry.update(role="judge", kind="sc" if len(urls) == 2 else "pq", score=score, sizes=sizes)
            reply = json.dumps({"score": [score], "reasoning": "scored"})
        usage = {"prompt_tokens": 50 + 10 * len(urls), "completion_tokens": len(reply) // 4}
        entry["usage"] = usage
        with self.lock:
            held = self._held
            entry["answered"] = held is None
            self.log.append(entry)
        if held is not None:
            held.wait(60)
            return None
        message = {"role": "assistant", "content": reply}
        return Reply(
            body={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}
        )


def write_config(path: Path, teachers: Teachers, edit: LocalServer, **extra: Any) -> Path:
    chat = f"openai:{teachers.url}#teacher"
    config = {
        "preset": "tiny",
        "planner": chat,
        "critic": chat,
        "generator": f"http:{edit.url}",
        "judge": chat,
        "loop": LOOP,
        "generation": {"width": 32, "height": 32},
        **extra,
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def records(out: Path) -> dict[str, Any]:
    """Every request's trace (without times) and execution record."""
    read = lambda path: json.loads(path.read_text())  # noqa: E731
    return {
        f.name: (stable(read(f / "trace.json")), read(f / "execution_record.json"))
        for f in (out / "requests").iterdir()
    }


SUB = re.compile(r"^Sub-category: (.+)$", re.MULTILINE)
BATCH = re.compile(r"^Batch: (\d+)$", re.MULTILINE)
COUNT = re.compile(r"write (\d+) different requests")
WORDS = re.findall(
    r"\w+",
    "amber basil cedar delta ember fjord garnet harbor indigo jasper kelp lantern meadow nectar opal "
    "pebble quartz river saffron timber umber velvet willow yarrow zephyr anchor bramble copper dune "
    "falcon glacier heron island juniper kestrel lagoon maple nutmeg orchid pine quill raven sparrow",
)


def taxonomy_file(path: Path, domains: int = 4, subs: int = 3) -> Path:
    data = {
        "domains": [
            {
                "id": f"domain-{d}",
                "name": f"Domain {d}",
                "description": f"Things of kind {d}.",
                "subcategories": [
                    {"id": f"sub-{d}-{s}", "name": f"Topic {d}.{s}", "description": f"Sub-topic {s} of {d}."}
                    for s in range(subs)
                ],
            }
            for d in range(domains)
        ]
    }
    path.write_text(yaml.safe_dump(data))
    return path


def lexicon_reply(sub: str) -> str:
    answer = {
        "lexicon": [f"{sub} {w}" for w in WORDS[:12]],
        "templates": ["How do I make {topic}?", "Tell {topic}."],
    }
    return f"<think>ok</think><answer>{json.dumps(answer)}</answer>"
