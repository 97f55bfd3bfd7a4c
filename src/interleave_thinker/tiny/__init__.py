"""The tiny preset: real Qwen3-VL and FLUX.2-klein classes at toy size behind the ``tiny:`` backend kind,
their deterministic builders (random and format-trained), and the shipped models the demo starts from.

Product code, not a test aid: ``make demo``, ``--preset tiny`` and the CLI use it. The package root
registers the kind (``kind.py``, light: no torch and no ``train`` at import); the builders load torch,
transformers and our SFT only when a model is built. Import the submodules directly: this file re-exports
nothing (see docs/architecture.md)."""
