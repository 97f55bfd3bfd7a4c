"""UEval: the benchmark (protocol.py: reader, layout, protocol, published numbers) and its scorer."""
