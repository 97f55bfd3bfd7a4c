"""A Hugging Face Space (Gradio SDK) running the interleave-thinker demo unchanged.

The preset comes from the Space's variables: INTERLEAVE_THINKER_DEMO_PRESET=tiny (the default) runs on
a CPU Space with stand-in models; `official` needs a GPU Space. Any other setting can be given as an
INTERLEAVE_THINKER_* variable (see docs/configuration.md), e.g. INTERLEAVE_THINKER_LOOP__MAX_ATTEMPTS=2.
"""

import os

from interleave_thinker.ui import DemoOptions, build_demo, launch_kwargs

options = DemoOptions(concurrency=int(os.environ.get("INTERLEAVE_THINKER_DEMO_CONCURRENCY", "1")))
demo = build_demo(os.environ.get("INTERLEAVE_THINKER_DEMO_PRESET", "tiny"), options=options)

if __name__ == "__main__":
    demo.launch(**launch_kwargs(options))
