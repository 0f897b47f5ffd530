"""The inference-backend interface every LLM backend implements.

A backend takes a batch of chat conversations and returns, for each, the completion
text, its token ids and per-token log-probabilities (the behaviour policy's, needed for
PPO). `allowed` optionally restricts each completion to one of a list of strings
(legal-move constrained decoding).

A backend may also offer `complete(prompts, params, allowed=None)`: the same for raw text
prompts, without the chat template (`arena serve`'s /v1/completions needs it), and fill
`Generation.top_logprobs` when `params.top_logprobs > 0` (else it raises ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

MAX_TOP_LOGPROBS = 20  # as the OpenAI API


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None
    top_logprobs: int = 0  # report the k most likely tokens at each step (Generation.top_logprobs)
    # one seed per conversation (instead of `seed`): row i samples from its own stream, so
    # its completion does not depend on the batch it is in (per-match seeds, agents.llm_agent)
    seeds: list[int] | None = None


@dataclass
class Generation:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    # per completion token, the `top_logprobs` most likely (token id, logprob), best first,
    # from the same distribution as `logprobs`; empty unless asked for
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    error: str = ""  # why, when finish_reason == "error" (the agent records it in the turn)


class Backend(Protocol):
    name: str

    def generate(
        self,
        conversations: list[list[dict]],
        params: SamplingParams,
        allowed: list[list[str]] | None = None,
    ) -> list[Generation]: ...


def content_text(content) -> str:
    """A chat message's text: its content is a string, null (""), or a list of OpenAI
    content parts [{"type": "text", "text": ...}] (joined). Anything else: ValueError."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ValueError(f"content must be a string or a list of text parts, got {str(content)[:80]!r}")


def check_request(
    conversations: list[list[dict]], params: SamplingParams, allowed: list[list[str] | None] | None
) -> None:
    """One-line ValueErrors for a malformed `generate` call (every backend calls this first,
    through `request_rows`)."""
    if not isinstance(conversations, list) or not conversations:
        raise ValueError("conversations must be a non-empty list of chat message lists")
    for i, conv in enumerate(conversations):
        if (
            not isinstance(conv, list)
            or not conv
            or not all(isinstance(m, dict) and "role" in m and "content" in m for m in conv)
        ):
            raise ValueError(
                f"conversation {i} must be a non-empty list of {{'role', 'content'}} dicts"
            )
    check_params(params)
    check_allowed(allowed, len(conversations))
    check_seeds(params, len(conversations))


def request_rows(
    conversations: list[list[dict]], params: SamplingParams, allowed: list[list[str] | None] | None
) -> list[list[str] | None]:
    """The opening of every backend's `generate`: check the call (`check_request`) and return
    each conversation's allowed strings (None for an unconstrained one)."""
    check_request(conversations, params, allowed)
    return list(allowed) if allowed is not None else [None] * len(conversations)


def check_prompts(
    prompts: list[str], params: SamplingParams, allowed: list[list[str] | None] | None
) -> None:
    """One-line ValueErrors for a malformed raw-text `complete` call."""
    if (
        not isinstance(prompts, list)
        or not prompts
        or not all(isinstance(p, str) and p for p in prompts)
    ):
        raise ValueError("prompts must be a non-empty list of non-empty strings")
    check_params(params)
    check_allowed(allowed, len(prompts))
    check_seeds(params, len(prompts))


def check_params(params: SamplingParams) -> None:
    if params.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {params.max_new_tokens}")
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if not 0 <= params.top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(
            f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {params.top_logprobs}"
        )


def check_seeds(params: SamplingParams, n: int) -> None:
    if params.seeds is not None and (
        len(params.seeds) != n or not all(isinstance(s, int) and s >= 0 for s in params.seeds)
    ):
        raise ValueError(
            f"seeds must be {n} non-negative integers (one per conversation), got {params.seeds!r}"
        )


def check_allowed(allowed: list[list[str] | None] | None, n: int) -> None:
    if allowed is not None:
        if len(allowed) != n:
            raise ValueError(f"allowed has {len(allowed)} entries for {n} conversations")
        for i, a in enumerate(allowed):
            if a is not None and (not a or not all(isinstance(s, str) and s for s in a)):
                raise ValueError(
                    f"allowed[{i}] must be None or a non-empty list of non-empty strings"
                )
