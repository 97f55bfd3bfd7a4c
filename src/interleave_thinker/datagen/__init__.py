"""The data engine: from a topic taxonomy to judged teacher trajectories and interleaved corpora."""
