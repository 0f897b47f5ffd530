"""`arena serve`: an OpenAI-compatible HTTP endpoint over a local model (nothing imports it but the CLI)."""
