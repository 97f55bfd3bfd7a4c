"""Test doubles of the served APIs that cannot run here (OpenAI chat and images, vLLM-Omni, a judge), each
speaking its real wire format on 127.0.0.1, on one shared server helper (:mod:`.server`)."""
