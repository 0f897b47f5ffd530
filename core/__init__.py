"""Shared records and machine facts: the floor every other package builds on (imports nothing of ours)."""
