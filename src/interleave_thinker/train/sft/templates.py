"""Chat templates for training: the inference template plus ``{% generation %}`` markers.

Why: assistant-only loss needs the processor to report which tokens the assistant wrote, which
transformers does from ``{% generation %}`` blocks. TRL ships such variants for the real Qwen3-VL
template; for our tiny template we write the variant here. The rendered text is identical to the
inference template's, so a model trained with it sees at inference exactly what it learned on.
"""

from __future__ import annotations

from typing import Any

from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.tiny_tokenizer import CHAT_TEMPLATE as TINY_CHAT_TEMPLATE
from interleave_thinker.core.tiny_tokenizer import CONTENT_PARTS as TINY_CONTENT_PARTS

_PARTS = TINY_CONTENT_PARTS

TINY_TRAINING_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}" + _PARTS + "{{- '<|im_end|>\\n' -}}{%- endgeneration -%}"
    "{%- else -%}" + _PARTS + "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def training_chat_template(processor: Any) -> str | None:
    """The template to train with; ``None`` when the processor's own already marks assistant turns."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = processor.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    if template is None:
        raise ConfigError("The checkpoint's processor has no chat template; SFT needs one to render turns.")
    if has_generation_markers(template):
        return None
    if template == TINY_CHAT_TEMPLATE:
        return TINY_TRAINING_TEMPLATE
    try:
        result = get_training_chat_template(processor)
    except ValueError as exc:
        raise ConfigError(
            f"No training variant of this checkpoint's chat template is known ({exc}); add "
            "{% generation %}...{% endgeneration %} around assistant turns and pass it as sft.chat_template, "
            "or set sft.assistant_only_loss: false."
        ) from None
    return str(result) if result is not None else None
