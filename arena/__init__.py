"""Plays many matches at once, batching LLM turns across matches, and records every turn."""
