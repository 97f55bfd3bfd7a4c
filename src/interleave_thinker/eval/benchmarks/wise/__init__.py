"""WISE: the benchmark (protocol.py: reader, layout, the two protocols, published numbers) and its scorer."""
