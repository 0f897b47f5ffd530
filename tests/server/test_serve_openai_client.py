"""`arena serve` on 127.0.0.1 with the tiny Llama, driven by the official `openai` client:
chat and text completions, n > 1, logprobs with top alternatives (checked against a
teacher-forced forward pass), streaming, and the 400s for what the server cannot do."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest
import torch

from agents.backend import Generation
from agents.transformers_backend import TransformersBackend
from server.serve import make_server

MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Rock, paper or scissors?"},
]


@pytest.fixture(scope="module")
def served():
    backend = TransformersBackend("tiny-llama")
    server = make_server(backend, "127.0.0.1", 0, model_name="tiny-llama")
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=60)
    yield backend, client, server
    client.close()
    server.close()


def forced_logprobs(backend, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log_softmax over the vocabulary at each completion position, one forward pass: (T, V)."""
    with torch.no_grad():
        logits = (
            backend.model(torch.tensor([prompt + completion]))
            .logits[0, len(prompt) - 1 : -1]
            .float()
        )
    return torch.log_softmax(logits, -1)


def check_logprobs(backend, prompt, ids, sampled, tops, k):
    """The sampled tokens' logprobs and the k alternatives per token are the model's: to 1e-4
    in fp32; in bf16 (the default where the CPU has native bf16) a decode step's attention
    rounds its scores to bf16 (`bf16_decode_attention`) where the one forward pass keeps them
    in fp32, which moved tiny-llama's logprobs by up to 2e-3."""
    tol = 1e-4 if next(backend.model.parameters()).dtype == torch.float32 else 5e-3
    expected = forced_logprobs(backend, prompt, ids)
    assert torch.allclose(torch.tensor(sampled), expected[torch.arange(len(ids)), ids], atol=tol)
    best = expected.topk(k, dim=-1).values
    for t, alts in enumerate(tops):
        assert len(alts) == k and alts == sorted(alts, reverse=True)
        assert torch.allclose(torch.tensor(alts), best[t], atol=tol)


def test_chat_n2_with_top_logprobs(served):
    backend, client, server = served
    batches = server.batcher.batches
    r = client.chat.completions.create(
        model="tiny-llama",
        messages=MESSAGES,
        n=2,
        max_tokens=6,
        temperature=1.0,
        seed=3,
        logprobs=True,
        top_logprobs=3,
    )
    assert (
        server.batcher.batches == batches + 1 and server.batcher.largest_batch >= 2
    )  # one batch of two rows
    assert [c.index for c in r.choices] == [0, 1]
    prompt = backend.encode(MESSAGES)
    assert r.model_extra["prompt_token_ids"] == prompt and r.usage.prompt_tokens == len(prompt)
    texts = []
    for c in r.choices:
        ids = c.model_extra["token_ids"]
        entries = c.logprobs.content
        assert len(entries) == len(ids) == len(c.logprobs.content) > 0
        assert "".join(e.token for e in entries).replace("<|im_end|>", "") == c.message.content
        check_logprobs(
            backend,
            prompt,
            ids,
            [e.logprob for e in entries],
            [[a.logprob for a in e.top_logprobs] for e in entries],
            3,
        )
        texts.append(c.message.content)
    assert r.usage.completion_tokens == sum(len(c.model_extra["token_ids"]) for c in r.choices)
    assert texts[0] != texts[1]  # two samples of one batch, not one sample twice


def test_chat_stream_joins_up_to_the_plain_answer(served):
    _, client, server = served
    kwargs = dict(
        model="tiny-llama",
        messages=MESSAGES,
        max_tokens=12,
        temperature=1.0,
        seed=5,
        logprobs=True,
        top_logprobs=2,
    )
    plain = client.chat.completions.create(**kwargs).choices[
        0
    ]  # the same seeded sample as streamed below
    assert len(set(plain.message.content)) > 3
    events = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(e.object == "chat.completion.chunk" for e in events)
    assert events[0].choices[0].delta.role == "assistant"
    content = [e.choices[0] for e in events if e.choices and e.choices[0].delta.content is not None]
    assert "".join(c.delta.content for c in content) == plain.message.content
    streamed = [lp for c in content if c.logprobs for lp in c.logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [
        (e.token, e.logprob) for e in plain.logprobs.content
    ]
    assert [[a.token for a in e.top_logprobs] for e in streamed] == [
        [a.token for a in e.top_logprobs] for e in plain.logprobs.content
    ]
    finish = [
        e.choices[0].finish_reason for e in events if e.choices and e.choices[0].finish_reason
    ]
    assert finish == [plain.finish_reason]
    assert events[-1].choices == [] and events[-1].usage.completion_tokens == len(streamed)
    # the wire format: server-sent events ending with [DONE]
    body = {"model": "tiny-llama", "messages": MESSAGES, "max_tokens": 3, "stream": True}
    with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"] == "text/event-stream"
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"


def test_text_completions_logprobs_n_and_prompt_lists(served):
    backend, client, _ = served
    prompt = "The capital of France is"
    r = client.completions.create(
        model="tiny-llama", prompt=prompt, max_tokens=5, temperature=1.0, seed=1, logprobs=2
    )
    assert r.object == "text_completion" and len(r.choices) == 1
    c = r.choices[0]
    ids, prompt_ids = c.model_extra["token_ids"], c.model_extra["prompt_token_ids"]
    assert prompt_ids == backend.tokenizer(prompt)["input_ids"]  # raw text: no chat template
    assert c.text == backend.tokenizer.decode(ids, skip_special_tokens=True)
    lp = c.logprobs
    assert (
        len(lp.tokens)
        == len(lp.token_logprobs)
        == len(lp.top_logprobs)
        == len(lp.text_offset)
        == len(ids)
    )
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(ids))]
    ordered = [sorted(d.values(), reverse=True) for d in lp.top_logprobs]
    if all(
        len(d) == 2 for d in lp.top_logprobs
    ):  # two alternatives that decode alike would share a key
        check_logprobs(backend, prompt_ids, ids, lp.token_logprobs, ordered, 2)
    many = client.completions.create(
        model="tiny-llama", prompt=["One, two,", "Red, green,"], n=2, max_tokens=4, temperature=1.0
    )
    assert [c.index for c in many.choices] == [0, 1, 2, 3] and all(
        c.logprobs is None for c in many.choices
    )
    firsts = [c.model_extra["prompt_token_ids"] for c in many.choices]
    assert firsts[0] == firsts[1] != firsts[2] == firsts[3]
    assert many.usage.prompt_tokens == len(firsts[0]) + len(firsts[2])


def test_text_completion_stream(served):
    _, client, _ = served
    kwargs = dict(
        model="tiny-llama",
        prompt="Once upon a time",
        max_tokens=10,
        temperature=1.0,
        seed=5,
        logprobs=1,
    )
    plain = client.completions.create(**kwargs).choices[0]
    events = list(client.completions.create(**kwargs, stream=True))
    assert "".join(e.choices[0].text for e in events) == plain.text
    assert [
        t for e in events if e.choices[0].logprobs for t in e.choices[0].logprobs.token_logprobs
    ] == plain.logprobs.token_logprobs
    assert [e.choices[0].finish_reason for e in events if e.choices[0].finish_reason] == [
        plain.finish_reason
    ]


@pytest.mark.parametrize(
    "call, kwargs, hint",
    [
        ("completions", {"prompt": "x", "echo": True}, "echo=True is not supported"),
        (
            "completions",
            {"prompt": "x", "logprobs": 21},
            "logprobs must be an integer from 0 to 20",
        ),
        ("completions", {"prompt": [1, 2, 3]}, "token-id prompts are not supported"),
        ("completions", {"prompt": "x", "best_of": 3}, "best_of=3 is not supported"),
        ("chat", {"messages": MESSAGES, "stop": ["\n"]}, "stop=['\\n'] is not supported"),
        ("chat", {"messages": MESSAGES, "n": 65}, "n must be an integer from 1 to 64"),
    ],
)
def test_what_the_server_cannot_do_is_a_clear_400(served, call, kwargs, hint):
    _, client, _ = served
    create = client.completions.create if call == "completions" else client.chat.completions.create
    with pytest.raises(openai.BadRequestError) as e:
        create(model="tiny-llama", max_tokens=2, **kwargs)
    assert hint in e.value.body["message"]


def test_text_pieces_keep_characters_split_over_tokens_whole(served):
    from server.openai_api import text_pieces

    backend, _, _ = served
    tok = backend.tokenizer
    text = "dice 🎲 roll: ünïcödé ✓ 四"
    ids = tok(text)["input_ids"] + [tok.eos_token_id]
    assert len(ids) > len(text.split())  # some characters take several tokens
    pieces = text_pieces(Generation(text, ids, [0.0] * len(ids)), tok)
    assert "".join(pieces) == text and len(pieces) == len(ids)
    assert not any("\ufffd" in p for p in pieces)


def test_dtype_float32_serves_the_fp32_forward():
    """`arena serve --dtype float32` builds an fp32 model whose logprobs match the one-pass
    forward to 1e-4, where the default (auto) is bf16 on a CPU with native bf16."""
    from cli.main import build_parser
    from server.serve import build_backend

    args = build_parser().parse_args(["serve", "tiny-llama", "--dtype", "float32", "--port", "0"])
    backend = build_backend(args.model, args.backend, args.dtype)
    assert next(backend.model.parameters()).dtype == torch.float32
    server = make_server(backend, "127.0.0.1", 0, model_name="tiny-llama")
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        with openai.OpenAI(
            base_url=server.url, api_key="none", max_retries=0, timeout=60
        ) as client:
            c = client.chat.completions.create(
                model="tiny-llama",
                messages=MESSAGES,
                max_tokens=6,
                temperature=1.0,
                seed=1,
                logprobs=True,
                top_logprobs=2,
            ).choices[0]
        entries = c.logprobs.content
        check_logprobs(
            backend,
            backend.encode(MESSAGES),
            c.model_extra["token_ids"],
            [e.logprob for e in entries],
            [[a.logprob for a in e.top_logprobs] for e in entries],
            2,
        )
    finally:
        server.close()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "tiny-llama", "--dtype", "float16"])
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        build_backend("tiny-llama", dtype="fp8")
