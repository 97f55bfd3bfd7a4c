"""Chat templates for training: the inference template plus ``{% generation %}`` markers.

Why: assistant-only loss needs the processor to report which tokens the assistant wrote, which
transformers does from ``{% generation %}`` blocks. TRL ships such variants for the real Qwen3-VL
template; the tiny models' variant is registered with the ``tiny`` kind in
``backends/chat_templates.py``, read here. The rendered text is identical to the inference template's, so
a model trained with it sees at inference exactly what it learned on.
"""

from __future__ import annotations

from typing import Any

from interleave_thinker.backends.chat_templates import TRAINING_VARIANTS
from interleave_thinker.core.errors import ConfigError


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
    if template in TRAINING_VARIANTS:
        return TRAINING_VARIANTS[template]
    try:
        result = get_training_chat_template(processor)
    except ValueError as exc:
        raise ConfigError(
            f"No training variant of this checkpoint's chat template is known ({exc}); add "
            "{% generation %}...{% endgeneration %} around assistant turns and pass it as sft.chat_template, "
            "or set sft.assistant_only_loss: false."
        ) from None
    return str(result) if result is not None else None
