"""``consistency``: our own measure of a sequence (protocol.py: reader, pinned rubric, protocol) and its scorer."""
