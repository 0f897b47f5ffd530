"""The OpenAI wire format of `arena serve`: request bodies in, response bodies and stream chunks out.

Pure functions, no HTTP (that is `server.app`). Two endpoints:

    POST /v1/chat/completions   messages (role + string content, or a list of text parts)
    POST /v1/completions        prompt: a string or a list of strings (raw text, no chat template)

Fields honoured by both: model (must match the served name when given), max_tokens /
max_completion_tokens (default 256, or what the context leaves; more than the context
leaves is a 400: `fit_context`), temperature (default 1.0), top_p, seed, n (1 to
MAX_N completions per prompt, generated in one batch), stream (server-sent events, ending
with `data: [DONE]`), stream_options.include_usage, and constrained decoding by
`structured_outputs: {"choice": [...]}` (vLLM >= 0.10.2 style) or `guided_choice: [...]`.
Log-probabilities: chat takes `logprobs: true` and `top_logprobs: k` (0-20, needs
logprobs); completions take the legacy `logprobs: k` (0-20: the sampled token's logprob
plus the k most likely). Fields the server cannot honour (`stop`, `logit_bias`,
penalties, `tools`, `echo`, `suffix`, `best_of` > 1...) are refused with a 400 naming
them unless they hold their no-op value; other unknown fields are ignored, as vLLM does
(e.g. `return_token_ids`: ids are always returned).

Response extension fields (the names vLLM uses with `return_token_ids`):
    choices[i].token_ids   completion token ids
    prompt_token_ids       the prompt's token ids (chat: top level; completions: per choice)

Streaming sends the completion after it is generated (the backends generate whole
completions), one chunk per token: chat chunks carry `delta.content` and that token's
logprobs, completion chunks `text` and the legacy logprobs. The pieces of text join up to
exactly the non-streamed text (incremental detokenization, so a character split over
several tokens arrives whole).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace

from agents.backend import MAX_TOP_LOGPROBS, Generation, SamplingParams, content_text

DEFAULT_MAX_TOKENS = 256
MAX_N = 64

_NO_OP = (None, False, 0, 0.0, "", [], {})
UNSUPPORTED = {  # fields this server cannot honour: refused unless at a no-op value
    "both": ("stop", "logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty"),
    "chat": ("tools", "functions"),
    "text": ("echo", "suffix"),
}


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    """One parsed request: `n` completions for each prompt."""

    kind: str  # "chat" (prompts are message lists) or "text" (prompts are strings)
    prompts: list
    params: SamplingParams
    allowed: list[str] | None  # constrained-decoding choices
    n: int
    logprobs: bool  # include logprobs in the response
    stream: bool
    include_usage: bool  # streaming: a last chunk with the usage
    default_max_tokens: bool = False  # max_tokens was not given: DEFAULT_MAX_TOKENS


# --- requests --------------------------------------------------------------------------------


def parse_chat(body, model_name: str) -> Request:
    """Validate a chat-completion request body; raises RequestError(400/404) with the reason."""
    _check_common(body, model_name, "chat")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of {role, content} objects")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(400, f"messages[{i}] must be an object with a string 'role'")
        try:
            clean.append({"role": m["role"], "content": content_text(m.get("content"))})
        except ValueError:
            raise RequestError(
                400, f"messages[{i}].content must be a string or a list of text parts"
            ) from None
    logprobs = body.get("logprobs") or False
    if not isinstance(logprobs, bool):
        raise RequestError(400, f"logprobs must be true or false, got {logprobs!r}")
    top = _count(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise RequestError(400, "top_logprobs needs logprobs=true")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise RequestError(
            400,
            "response_format other than {'type': 'text'} is not supported; use structured_outputs.choice",
        )
    return _request(body, "chat", [clean], logprobs, top)


def parse_completion(body, model_name: str) -> Request:
    """Validate a (legacy) completion request body; raises RequestError(400/404) with the reason."""
    _check_common(body, model_name, "text")
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if (
        not isinstance(prompts, list)
        or not prompts
        or not all(isinstance(p, str) and p for p in prompts)
    ):
        raise RequestError(
            400,
            "'prompt' must be a non-empty string or a non-empty list of them (token-id prompts are not supported)",
        )
    best_of = body.get("best_of")
    if best_of not in (None, 1, body.get("n", 1)):
        raise RequestError(400, f"best_of={best_of!r} is not supported (only best_of = n)")
    logprobs = body.get("logprobs")
    top = 0 if logprobs is None else _count(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    return _request(body, "text", prompts, logprobs is not None, top)


def _check_common(body, model_name: str, kind: str) -> None:
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(
            404, f"model {model!r} is not served here; this server serves {model_name!r}"
        )
    for key in (*UNSUPPORTED["both"], *UNSUPPORTED[kind]):
        if body.get(key) not in _NO_OP:
            raise RequestError(400, f"{key}={body[key]!r} is not supported by this server")


def _request(body: dict, kind: str, prompts: list, logprobs: bool, top: int) -> Request:
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    default_max_tokens = max_tokens is None
    max_tokens = DEFAULT_MAX_TOKENS if default_max_tokens else max_tokens
    if not _is_int(max_tokens) or max_tokens < 1:
        raise RequestError(400, f"max_tokens must be a positive integer, got {max_tokens!r}")
    temperature = _number(body, "temperature", 1.0)
    if temperature < 0:
        raise RequestError(400, f"temperature must be >= 0, got {temperature}")
    top_p = _number(body, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise RequestError(400, f"top_p must be in (0, 1], got {top_p}")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise RequestError(400, f"seed must be an integer or null, got {seed!r}")
    n = _count(body, "n", 1, MAX_N)
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError(400, f"stream must be true or false, got {stream!r}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(400, "stream_options must be an object")
    params = SamplingParams(
        max_new_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, top_logprobs=top
    )
    return Request(
        kind,
        prompts,
        params,
        _choices(body),
        n,
        logprobs,
        stream,
        bool(options.get("include_usage")),
        default_max_tokens,
    )


def fit_context(request: Request, prompt_lengths: list[int], context: int) -> Request:
    """Check the request's max_tokens against what the model's context leaves.

    Args:
        request: a parsed request.
        prompt_lengths: the token count of each of its prompts.
        context: the model's context length in tokens (prompt plus completion).

    Returns:
        The request; when max_tokens was not given, with it lowered to what the longest
        prompt leaves.

    Raises:
        RequestError: 400 when a prompt fills the context, or max_tokens asks for more.
    """
    longest = max(prompt_lengths)
    room = context - longest
    if room < 1:
        raise RequestError(
            400,
            f"the prompt is {longest} tokens and this model's context is {context} tokens; shorten the prompt",
        )
    asked = request.params.max_new_tokens
    if asked <= room:
        return request
    if request.default_max_tokens:
        return replace(request, params=replace(request.params, max_new_tokens=room))
    raise RequestError(
        400,
        f"max_tokens={asked} is more than this model's context leaves: {context} tokens of context, "
        f"{longest} in the prompt, so at most {room}",
    )


def _choices(body: dict) -> list[str] | None:
    so = body.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict) or set(so) - {"choice"} or "choice" not in so:
            raise RequestError(400, "structured_outputs supports only {'choice': [...]} here")
        choices, where = so["choice"], "structured_outputs.choice"
    elif body.get("guided_choice") is not None:
        choices, where = body["guided_choice"], "guided_choice"
    else:
        return None
    if (
        not isinstance(choices, list)
        or not choices
        or not all(isinstance(c, str) and c for c in choices)
    ):
        raise RequestError(400, f"{where} must be a non-empty list of non-empty strings")
    return choices


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _count(body: dict, key: str, low: int, high: int) -> int:
    x = body.get(key)
    if x is None:
        return low
    if not _is_int(x) or not low <= x <= high:
        raise RequestError(400, f"{key} must be an integer from {low} to {high}, got {x!r}")
    return x


def _number(body: dict, key: str, default: float) -> float:
    x = body.get(key)
    if x is None:
        return default
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise RequestError(400, f"{key} must be a number, got {x!r}")
    return float(x)


# --- responses -------------------------------------------------------------------------------
# `gens` holds n generations per prompt, prompt-major: choice i is gens[i].


def response(request: Request, gens: list[Generation], model: str, tokenizer) -> dict:
    """The non-streamed response body."""
    chat = request.kind == "chat"
    choices = []
    for i, g in enumerate(gens):
        choice = {
            "index": i,
            "finish_reason": g.finish_reason,
            "logprobs": None,
            "token_ids": list(g.token_ids),
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": g.text}
            if request.logprobs:
                choice["logprobs"] = {
                    "content": _chat_logprobs(g, range(len(g.logprobs)), tokenizer)
                }
        else:
            choice["text"] = g.text
            choice["prompt_token_ids"] = list(g.prompt_token_ids)
            if request.logprobs:
                choice["logprobs"] = _text_logprobs(
                    g, range(len(g.logprobs)), tokenizer, _offsets(g, tokenizer)
                )
        choices.append(choice)
    body = _envelope(request, model, "chat.completion" if chat else "text_completion")
    body["choices"] = choices
    if chat:
        body["prompt_token_ids"] = list(gens[0].prompt_token_ids)
    body["usage"] = _usage(request, gens)
    return body


def chunks(request: Request, gens: list[Generation], model: str, tokenizer):
    """The streamed response: chunk bodies, one per token of each choice (then one with the
    finish reason, and the usage if asked); the caller sends `[DONE]` after them."""
    chat = request.kind == "chat"
    head = _envelope(request, model, "chat.completion.chunk" if chat else "text_completion")
    for i, g in enumerate(gens):
        pieces = text_pieces(g, tokenizer)
        offsets = None if chat else _offsets(g, tokenizer)
        if chat:
            yield {
                **head,
                "choices": [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        for k, piece in enumerate(pieces):
            tokens = (
                range(k, k + 1) if len(pieces) == len(g.logprobs) else range(len(g.logprobs))
            )  # else: one piece
            logprobs = None
            if request.logprobs:
                logprobs = (
                    {"content": _chat_logprobs(g, tokens, tokenizer)}
                    if chat
                    else _text_logprobs(g, tokens, tokenizer, offsets)
                )
            choice = {"index": i, "logprobs": logprobs, "finish_reason": None}
            choice.update({"delta": {"content": piece}} if chat else {"text": piece})
            yield {**head, "choices": [choice]}
        yield {
            **head,
            "choices": [
                {
                    "index": i,
                    "finish_reason": g.finish_reason,
                    "logprobs": None,
                    "token_ids": list(g.token_ids),
                    **({"delta": {}} if chat else {"text": ""}),
                }
            ],
        }
    if request.include_usage:
        yield {**head, "choices": [], "usage": _usage(request, gens)}


def _envelope(request: Request, model: str, obj: str) -> dict:
    prefix = "chatcmpl" if request.kind == "chat" else "cmpl"
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": obj,
        "created": int(time.time()),
        "model": model,
    }


def _usage(request: Request, gens: list[Generation]) -> dict:
    prompt = sum(
        len(g.prompt_token_ids) for g in gens[:: request.n]
    )  # each prompt once, as OpenAI counts
    completion = sum(len(g.token_ids) for g in gens)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def token_strings(ids: list[int], tokenizer) -> list[str]:
    """Each token decoded alone (special tokens included); "" without a tokenizer."""
    return [tokenizer.decode([t]) for t in ids] if tokenizer is not None else [""] * len(ids)


def _chat_logprobs(g: Generation, tokens: range, tokenizer) -> list[dict]:
    """The chat format's logprobs.content entries of the given completion tokens."""
    names = (
        token_strings([g.token_ids[k] for k in tokens], tokenizer)
        if len(g.token_ids) == len(g.logprobs)
        else [""] * len(tokens)
    )
    out = []
    for name, k in zip(names, tokens):
        top = g.top_logprobs[k] if k < len(g.top_logprobs) else []
        alts = [
            _entry(t, lp) for t, (_, lp) in zip(token_strings([i for i, _ in top], tokenizer), top)
        ]
        out.append({**_entry(name, g.logprobs[k]), "top_logprobs": alts})
    return out


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def _text_logprobs(g: Generation, tokens: range, tokenizer, offsets: list[int]) -> dict:
    entries = _chat_logprobs(g, tokens, tokenizer)
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{a["token"]: a["logprob"] for a in e["top_logprobs"]} for e in entries],
        "text_offset": [offsets[k] for k in tokens],
    }


def _offsets(g: Generation, tokenizer) -> list[int]:
    """Character offset of each token's string in the completion (the legacy text_offset)."""
    names = (
        token_strings(g.token_ids, tokenizer)
        if len(g.token_ids) == len(g.logprobs)
        else [""] * len(g.logprobs)
    )
    offsets, at = [], 0
    for name in names:
        offsets.append(at)
        at += len(name)
    return offsets


def text_pieces(g: Generation, tokenizer) -> list[str]:
    """The completion text cut into one piece per token, joining up to exactly `g.text`.

    Incremental detokenization as vLLM and TGI do it: a token's piece is what decoding a
    few tokens of context plus it adds to decoding the context alone, held back (and sent
    with a later token) while it ends in an incomplete character. One piece (the whole
    text) when there is no tokenizer or the pieces would not add up.
    """
    if tokenizer is None or not g.token_ids or len(g.token_ids) != len(g.logprobs):
        return [g.text]
    ids, pieces = g.token_ids, []
    prefix, read = 0, 0  # ids[prefix:read] is the context already sent
    for k in range(1, len(ids) + 1):
        before = tokenizer.decode(ids[prefix:read], skip_special_tokens=True)
        now = tokenizer.decode(ids[prefix:k], skip_special_tokens=True)
        if len(now) > len(before) and not now.endswith("\ufffd") and now.startswith(before):
            pieces.append(now[len(before) :])
            prefix, read = read, k
        else:
            pieces.append("")
    sent = "".join(pieces)
    if not g.text.startswith(sent):
        return [g.text]
    pieces[-1] += g.text[len(sent) :]
    return pieces
