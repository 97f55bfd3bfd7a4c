"""The streaming web demo (Gradio): ``from interleave_thinker.ui import build_demo``.

Needs the ``demo`` extra: ``pip install 'interleave-thinker[demo]'``.
"""

from interleave_thinker.ui.app import build_demo, launch_kwargs
from interleave_thinker.ui.options import DemoOptions

__all__ = ["DemoOptions", "build_demo", "launch_kwargs"]
