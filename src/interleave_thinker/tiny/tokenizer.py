"""A small byte-level BPE tokenizer trained locally, shaped like the Qwen tokenizers.

Why: the tiny preset must work fully offline, so it cannot download Qwen's vocabulary. We train a
few-thousand-token byte-level BPE on a corpus generated in code (English words, plan/verdict JSON,
Python dict reprs, reasoning tags), then wrap it in transformers' ``Qwen2Tokenizer`` with the same
pre-tokenizer as the real one, so loading it back rebuilds exactly the same tokenizer. Training is
deterministic: the corpus has a fixed order and the BPE trainer breaks ties by pair order.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import Qwen2Tokenizer

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
THINK_TOKENS = ("<think>", "</think>")
SPECIAL_TOKENS = (IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
"""Control tokens, added in this fixed order after the trained vocabulary (ids are stable)."""

TINY_VOCAB_SIZE = 2048
"""Upper bound given to the BPE trainer; the corpus decides how many merges are actually learned."""

# Our own ChatML-style template (not Qwen's): string or multi-part content, image/video parts become
# vision placeholders that the processor expands, and ``enable_thinking=False`` closes an empty think
# block like Qwen3 templates do, so callers that pass it (the FLUX.2 pipeline does) see familiar text.
CONTENT_PARTS = (
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
)
"""One message's content: a string, or parts where image/video become the processor's placeholders."""

GENERATION_PROMPT = (
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)
"""The assistant header after the last message; ``enable_thinking=False`` closes an empty think block."""

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}" + CONTENT_PARTS + "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}" + GENERATION_PROMPT
)

TRAINING_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}" + CONTENT_PARTS + "{{- '<|im_end|>\\n' -}}{%- endgeneration -%}"
    "{%- else -%}" + CONTENT_PARTS + "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}" + GENERATION_PROMPT
)
""":data:`CHAT_TEMPLATE` with ``{% generation %}`` markers around assistant turns, for assistant-only SFT loss
(transformers reads the markers); it renders the same text, so a model sees at inference what it learned on."""

_WORD_TEXT = """
the a an of to and in is it that for on with as by at from this be are was were not or but if then
so all any each every one two three four five six seven eight nine ten first second third last next
step plan image images picture photo drawing scene story text prompt edit generate generated refine
critic planner check score pass fail accepted rejected reason reasoning answer question task goal
instruction description style color colour red orange yellow green blue purple pink white black gray
brown light dark bright small large big tiny huge tall short round square left right top bottom
center middle front back background foreground sky sun moon star cloud rain snow tree forest flower
grass river lake sea ocean beach mountain hill road city street house room window door table chair
book cup plate bowl apple bread cake cat dog bird fish horse cow person man woman child boy girl
hand face eye hair hat shirt dress shoe car bus train boat plane bike ball box bag lamp clock sign
paper pen wall floor roof garden park bridge tower castle ship robot dragon flag map add remove
replace change make keep move put place show draw paint turn open close hold sit stand walk run
jump look see find use give take cut cook wash build write read sing play sleep wake smile cry same
different new old before after during while now again more less most very still also only just
should must can will would could may keep consistent sequence frame panel character object layout
lighting shadow texture detail realistic cartoon sketch watercolor oil style photorealistic quality
error missing wrong correct true false none null yes no done ok fix issue issues problem result
"""

_KEYS = (
    "execution_plan",
    "step_number",
    "step_name",
    "instruction",
    "prompt",
    "refine_prompt",
    "reasoning",
    "success",
    "accepted",
    "score",
    "issues",
    "auxiliary_text",
    "kind",
    "status",
)


def tiny_corpus() -> list[str]:
    """Deterministic training text: prose, JSON, dict reprs and reasoning tags in a fixed order."""
    words = _WORD_TEXT.split()
    n = len(words)
    lines: list[str] = []
    for i in range(600):
        a, b, c, d = words[i % n], words[(i * 7 + 3) % n], words[(i * 13 + 5) % n], words[(i * 31 + 11) % n]
        key, key2 = _KEYS[i % len(_KEYS)], _KEYS[(i * 5 + 1) % len(_KEYS)]
        flag = ("True", "False", "None")[i % 3]
        jflag = ("true", "false", "null")[i % 3]
        lines.append(f"The {a} {b} is {c} and {d}. {a.capitalize()} {c}, then {b} the {d}!")
        lines.append(f"{{'{key}': [{{'step_number': {i % 12}, '{key2}': '{a} {b} {c}', 'done': {flag}}}]}}")
        lines.append(f'{{"{key}": {{"{key2}": "{d} {a}", "score": {i % 10}.{i % 7}, "ok": {jflag}}}}}')
        lines.append(f"<think>\n{a} {b}? {c} {d}: {i}.\n</think>\n<answer>{b} {c}</answer>")
        lines.append(f"- Step {i % 9 + 1}: {a} the {b} ({c}); `{d}` -> {i * 17 % 1000}\n")
    return lines


def build_tiny_tokenizer(vocab_size: int = TINY_VOCAB_SIZE) -> Qwen2Tokenizer:
    """Train the byte-level BPE and wrap it as ``Qwen2Tokenizer`` with Qwen3-VL's special tokens."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    # Same normalizer/pre-tokenizer as Qwen2Tokenizer rebuilds on load, so the learned merges match it.
    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[ENDOFTEXT],
    )
    backend.train_from_iterator(tiny_corpus(), trainer=trainer)
    model: dict[str, Any] = json.loads(backend.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]

    tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        unk_token=None,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
    )
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS], special_tokens=True
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    tokenizer.eos_token = IM_END  # chat turns end with <|im_end|>, like the real Qwen3 tokenizers
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
