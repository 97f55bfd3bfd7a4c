"""Services: the generator "/edit" service and an OpenAI-compatible chat server over local models."""
