"""``custom``: your own questions and rubrics, scored UEval-style (protocol.py: reader, texts, protocol)."""
