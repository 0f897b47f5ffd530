"""The inference-backend interface every LLM backend implements.

A backend takes a batch of chat conversations and returns, for each, the completion
text, its token ids and per-token log-probabilities (the behaviour policy's, needed for
PPO). `allowed` optionally restricts each completion to one of a list of strings
(legal-move constrained decoding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None


@dataclass
class Generation:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "error"


class Backend(Protocol):
    name: str

    def generate(
        self,
        conversations: list[list[dict]],
        params: SamplingParams,
        allowed: list[list[str]] | None = None,
    ) -> list[Generation]: ...
