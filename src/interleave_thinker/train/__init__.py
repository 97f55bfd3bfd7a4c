"""Training: datasets, rewards, and SFT / GRPO on TRL."""
