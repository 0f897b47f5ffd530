"""The HTTP backend (agents.openai_backend) against a real `arena serve` server on localhost.

End to end with the tiny Llama (logprobs checked against a teacher-forced forward pass),
then failure behaviour with small in-test backends behind the same real server: a backend
slower than the client timeout, a backend that raises, a concurrency limit counted on
the server side, micro-batching, and malformed requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import torch

from agents.backend import Generation, SamplingParams
from agents.openai_backend import OpenAIBackend
from cli.main import main as arena_main
from core.records import read_jsonl
from server.serve import make_server

CONV = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Rock, paper or scissors?"},
]


@contextlib.contextmanager
def running(backend, **kwargs):
    """A real server for `backend` on a free localhost port, in a thread."""
    server = make_server(backend, "127.0.0.1", 0, **kwargs)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.close()


class EchoBackend:
    """Answers each conversation with its last message reversed; records batch sizes."""

    name = "echo"

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.calls: list[int] = []

    def generate(self, conversations, params, allowed=None):
        self.calls.append(len(conversations))
        time.sleep(self.delay)
        return [
            Generation(c[-1]["content"][::-1], [5, 6], [-0.5, -0.25], [1, 2, 3])
            for c in conversations
        ]


class StuckBackend:
    """Blocks until released (or 10 s): slower than any client timeout in these tests."""

    name = "stuck"

    def __init__(self):
        self.release = threading.Event()

    def generate(self, conversations, params, allowed=None):
        self.release.wait(10)
        return [Generation("late") for _ in conversations]


class FailingBackend:
    """Raises on any batch holding a conversation that mentions `trigger`."""

    name = "failing"

    def __init__(self, trigger: str = ""):
        self.trigger = trigger
        self.calls = 0

    def generate(self, conversations, params, allowed=None):
        self.calls += 1
        if any(self.trigger in c[-1]["content"] for c in conversations):
            raise RuntimeError("boom: out of KV cache")
        return [Generation("fine", [9], [-0.1], [1]) for c in conversations]


@pytest.fixture(scope="module")
def tiny():
    from agents.transformers_backend import TransformersBackend

    backend = TransformersBackend(
        "tiny-llama", dtype="float32"
    )  # `auto` is bf16 on AVX-512 BF16 CPUs: one-ulp logit differences
    with running(backend, model_name="tiny-llama") as server:
        yield backend, server


def test_end_to_end_tiny_llama_text_token_ids_and_logprobs(tiny):
    backend, server = tiny
    convs = [
        CONV,
        [{"role": "user", "content": "Say hi."}],
        [{"role": "user", "content": "Pick a number from 1 to 9."}],
    ]
    with OpenAIBackend(server.url, "tiny-llama", timeout=30) as client:
        gens = client.generate(convs, SamplingParams(max_new_tokens=6, temperature=1.0, seed=7))
    assert not client.errors
    tok, model = backend.tokenizer, backend.model
    for conv, g in zip(convs, gens):
        assert g.finish_reason in ("stop", "length")
        assert g.prompt_token_ids == backend.encode(conv)
        assert 0 < len(g.token_ids) == len(g.logprobs) <= 6
        assert g.text == tok.decode(g.token_ids, skip_special_tokens=True)
        # the logprobs that crossed the wire are the model's: recompute them teacher-forced
        ids = torch.tensor([g.prompt_token_ids + g.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(g.prompt_token_ids) - 1 : -1].float()  # (T, V)
        expected = (
            torch.log_softmax(logits, -1)
            .gather(-1, torch.tensor(g.token_ids).view(-1, 1))
            .squeeze(-1)
        )
        # the server decodes with a KV cache in a padded batch, this is one full forward: in fp32 they
        # agree to ~1e-6 (in bf16 a logit's last bit differs, up to 2e-3 on logprobs near -10)
        assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-4)


def test_constrained_choice_and_raw_response_format(tiny):
    _, server = tiny
    choices = ["rock", "paper", "scissors"]
    with OpenAIBackend(server.url, "tiny-llama", timeout=30) as client:
        gens = client.generate(
            [CONV, CONV, CONV],
            SamplingParams(max_new_tokens=8, seed=1),
            allowed=[choices, ["10", "11"], None],
        )
    assert gens[0].text in choices and gens[1].text in ("10", "11")
    # the legacy vLLM field, a raw request: standard fields plus the token-id extension
    body = {
        "model": "tiny-llama",
        "messages": CONV,
        "max_tokens": 8,
        "logprobs": True,
        "guided_choice": choices,
        "seed": 3,
    }
    data = httpx.post(server.url + "/chat/completions", json=body, timeout=30).json()
    choice = data["choices"][0]
    assert data["object"] == "chat.completion" and data["model"] == "tiny-llama"
    assert choice["message"]["content"] in choices and choice["finish_reason"] == "stop"
    tokens = [c["token"] for c in choice["logprobs"]["content"]]
    assert "".join(tokens).replace("<|im_end|>", "") == choice["message"]["content"]
    assert len(choice["token_ids"]) == len(tokens) == data["usage"]["completion_tokens"]
    assert data["usage"]["prompt_tokens"] == len(data["prompt_token_ids"]) > 0
    models = httpx.get(server.url + "/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_client_timeout_retries_then_error_generation():
    backend = StuckBackend()
    with running(backend) as server:
        try:
            with OpenAIBackend(
                server.url, "stuck", timeout=0.3, max_retries=2, backoff=0.05
            ) as client:
                t0 = time.monotonic()
                gens = client.generate([CONV], SamplingParams())
                elapsed = time.monotonic() - t0
            assert server.stats["requests"] == 3  # first attempt + 2 retries
        finally:
            backend.release.set()
    assert gens == [Generation(text="", finish_reason="error", error=client.errors[0])]
    assert (
        len(client.errors) == 1
        and "timed out" in client.errors[0]
        and "3 attempts" in client.errors[0]
    )
    assert 0.9 <= elapsed < 0.9 + 0.15 + 1.0  # 3 timeouts + at most 0.05 + 0.1 backoff, plus slack


def test_server_error_500_retries_then_error_generation():
    backend = FailingBackend()
    with running(backend) as server:
        with OpenAIBackend(server.url, "failing", timeout=5, max_retries=2, backoff=0.01) as client:
            t0 = time.monotonic()
            gens = client.generate([CONV], SamplingParams())
            elapsed = time.monotonic() - t0
        raw = httpx.post(server.url + "/chat/completions", json={"messages": CONV})
    assert raw.status_code == 500 and "boom: out of KV cache" in raw.json()["error"]["message"]
    assert gens[0].finish_reason == "error" and gens[0].text == ""
    assert backend.calls == 3 + 1
    assert "HTTP 500" in client.errors[0] and "boom" in client.errors[0]
    assert elapsed < 2.0


def test_one_failing_request_does_not_sink_its_batch():
    backend = FailingBackend(trigger="poison")
    with running(backend, batch_wait=0.2) as server:
        with OpenAIBackend(server.url, "failing", max_retries=1, backoff=0.01) as client:
            convs = [[{"role": "user", "content": t}] for t in ("a", "poison", "b")]
            gens = client.generate(convs, SamplingParams())
    assert [g.finish_reason for g in gens] == ["stop", "error", "stop"]
    assert [g.text for g in gens] == ["fine", "", "fine"]
    assert gens[0].token_ids == [9] and gens[0].logprobs == [-0.1]
    assert len(client.errors) == 1


def test_concurrency_limit_is_respected_and_order_kept():
    backend = EchoBackend(delay=0.05)
    with running(backend, batch_wait=0.0) as server:
        with OpenAIBackend(server.url, "echo", concurrency=3) as client:
            convs = [[{"role": "user", "content": f"message {i}"}] for i in range(12)]
            gens = client.generate(convs, SamplingParams())
        assert server.stats["peak_in_flight"] == 3
        assert server.stats["requests"] == 12
    assert [g.text for g in gens] == [f"message {i}"[::-1] for i in range(12)]
    assert all(
        g.token_ids == [5, 6] and g.logprobs == [-0.5, -0.25] and g.prompt_token_ids == [1, 2, 3]
        for g in gens
    )


def test_concurrent_requests_are_micro_batched():
    backend = EchoBackend(delay=0.1)
    with running(backend, batch_wait=0.05, max_batch=8) as server:
        with OpenAIBackend(server.url, "echo", concurrency=8) as client:
            convs = [[{"role": "user", "content": f"turn {i}"}] for i in range(8)]
            gens = client.generate(convs, SamplingParams())
        assert server.batcher.largest_batch >= 4
    assert sum(backend.calls) == 8 and len(backend.calls) <= 3
    assert [g.text for g in gens] == [f"turn {i}"[::-1] for i in range(8)]


@pytest.mark.parametrize(
    "body, status, hint",
    [
        (b"{not json", 400, "not valid JSON"),
        ({"model": "echo"}, 400, "'messages' must be a non-empty list"),
        ({"messages": "hi"}, 400, "'messages' must be a non-empty list"),
        ({"messages": [{"content": "hi"}]}, 400, "string 'role'"),
        ({"messages": [{"role": "user", "content": 3}]}, 400, "content must be a string"),
        ({"messages": CONV, "n": 0}, 400, "n must be an integer from 1 to 64"),
        ({"messages": CONV, "temperature": -1}, 400, "temperature must be >= 0"),
        ({"messages": CONV, "max_tokens": 0}, 400, "max_tokens must be a positive integer"),
        ({"messages": CONV, "top_p": 0}, 400, "top_p must be in (0, 1]"),
        ({"messages": CONV, "guided_choice": []}, 400, "non-empty list"),
        ({"messages": CONV, "structured_outputs": {"regex": "a+"}}, 400, "only {'choice'"),
        ({"messages": CONV, "stream": "yes"}, 400, "stream must be true or false"),
        ({"messages": CONV, "stop": ["\n"]}, 400, "stop=['\\n'] is not supported"),
        ({"messages": CONV, "top_logprobs": 2}, 400, "top_logprobs needs logprobs=true"),
        ({"messages": CONV, "model": "gpt-4"}, 404, "this server serves 'echo'"),
    ],
)
def test_malformed_requests_get_a_clear_4xx(body, status, hint):
    backend = EchoBackend()
    with running(backend) as server:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        r = httpx.post(server.url + "/chat/completions", **kwargs)
        assert httpx.get(server.url + "/nowhere").status_code == 404
    assert r.status_code == status
    assert hint in r.json()["error"]["message"]
    assert backend.calls == []


class PickyBackend(EchoBackend):
    """Refuses what it cannot do with a ValueError, as the vllm backend refuses top_logprobs."""

    def generate(self, conversations, params, allowed=None):
        if params.top_logprobs:
            raise ValueError("this backend does not report top_logprobs")
        return super().generate(conversations, params, allowed)


def test_what_the_backend_cannot_do_is_a_400_naming_it():
    backend = PickyBackend()
    with running(backend) as server:
        refused = httpx.post(
            server.url + "/chat/completions",
            json={"messages": CONV, "logprobs": True, "top_logprobs": 2},
        )
        fine = httpx.post(
            server.url + "/chat/completions", json={"messages": CONV, "logprobs": True, "n": 3}
        )
        raw = httpx.post(
            server.url + "/completions", json={"prompt": "hi"}
        )  # no `complete`: chat only
    assert (
        refused.status_code == 400
        and "does not report top_logprobs" in refused.json()["error"]["message"]
    )
    assert (
        fine.status_code == 200
        and [c["message"]["content"] for c in fine.json()["choices"]]
        == [CONV[-1]["content"][::-1]] * 3
    )
    assert backend.calls == [3]  # the n=3 request was one batch (the refused one raised first)
    assert (
        raw.status_code == 400 and "serves chat completions only" in raw.json()["error"]["message"]
    )


def test_client_does_not_retry_4xx_and_raises_on_unknown_model():
    backend = EchoBackend()
    with running(backend) as server:
        with OpenAIBackend(server.url, "echo", max_retries=3, backoff=0.01) as client:
            gens = client.generate(
                [[{"role": "user", "content": 5}]], SamplingParams()
            )  # not text: 400
            assert server.stats["requests"] == 1
            assert (
                gens[0].finish_reason == "error"
                and "HTTP 400" in client.errors[0]
                and "not retried" in client.errors[0]
            )
        with OpenAIBackend(server.url, "not-served", max_retries=3, backoff=0.01) as wrong:
            with pytest.raises(RuntimeError, match="HTTP 404.*not served here"):
                wrong.generate([CONV], SamplingParams())
        assert server.stats["requests"] == 2


def test_connection_refused_is_retried_then_error_generation():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OpenAIBackend(
        f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.01, timeout=2
    ) as client:
        gens = client.generate([CONV, CONV], SamplingParams())
    assert [g.finish_reason for g in gens] == ["error", "error"]
    assert all("connection error" in e and "2 attempts" in e for e in client.errors)


def test_bad_client_arguments_are_one_line_value_errors():
    with pytest.raises(ValueError, match="base_url must start with http"):
        OpenAIBackend("localhost:8000", "m")
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        OpenAIBackend("http://localhost:8000/v1", "m", concurrency=0)
    with OpenAIBackend("http://localhost:8000/v1", "m", extensions=False) as client:
        with pytest.raises(ValueError, match="constrained decoding needs extensions=True"):
            client.generate([CONV], SamplingParams(), allowed=[["a"]])


def test_arena_serve_entry_point_serves_tiny_llama():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.serve", "tiny-llama", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "ARENA_API_KEY"},
    )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url.replace("/v1", "/health"), timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.2)
        with OpenAIBackend(url, "tiny-llama", timeout=30) as client:
            gen = client.generate([CONV], SamplingParams(max_new_tokens=4, seed=0))[0]
        assert (
            gen.finish_reason in ("stop", "length") and len(gen.token_ids) == len(gen.logprobs) > 0
        )
    finally:
        proc.terminate()
        proc.wait(10)
    assert "No API key (--api-key or $ARENA_API_KEY)" in proc.stdout.read()


# --- servers that misbehave in ways `arena serve` never does -------------------------------


class _ReplyHandler(BaseHTTPRequestHandler):
    """Answers a chat completion with `server.content(user_text)` as message.content."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = self.server.content(body["messages"][-1]["content"])
        data = json.dumps(
            {
                "choices": [
                    {"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ]
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def replying(content):
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), _ReplyHandler
    )  # daemon threads: kept-alive connections do not block shutdown
    server.content = content
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _first_legal_in_parts(user_text: str) -> list[dict]:
    move = re.search(r"LEGAL MOVES: \[(\w+)\]", user_text).group(1)
    return [{"type": "text", "text": "I take "}, {"type": "text", "text": f"[{move}]"}]


@pytest.mark.parametrize(
    "reply, valid",
    [
        (_first_legal_in_parts, True),  # the OpenAI schema's content parts: joined
        (lambda _: 7, False),  # a number: an invalid reply, recorded, then the fallback
        (lambda _: [{"type": "image_url", "image_url": {"url": "x"}}], False),
    ],
)
def test_arena_play_over_content_that_is_not_a_string(tmp_path, reply, valid):
    out = tmp_path / "run.jsonl"
    with replying(reply) as url:
        spec = f"llm:m,backend=openai,base_url={url},fallback=random,max_retries=1"
        assert (
            arena_main(
                [
                    "play",
                    "tic_tac_toe",
                    "--agents",
                    spec,
                    "random",
                    "--matches",
                    "2",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
    records = list(read_jsonl(out))
    turns = [t for r in records for t in r.turns if t.agent != "random"]
    assert len(records) == 2
    assert turns and all(t.valid == valid for t in turns)
    if valid:
        assert all(
            t.completion == f"I take [{t.legal_moves[0]}]" and t.move == t.legal_moves[0]
            for t in turns
        )
    else:
        assert all(t.fallback == "random" and len(t.attempts) == 2 for t in turns)
        assert all(
            "backend_error: malformed response" in a.error and "content must be" in a.error
            for t in turns
            for a in t.attempts
        )


@contextlib.contextmanager
def trickling(interval: float):
    """A server that sends a valid answer one byte every `interval` seconds; counts connections."""
    body = json.dumps({"choices": [{"message": {"content": "[4]"}}]}).encode()
    data = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    sock = socket.create_server(("127.0.0.1", 0))
    stats = {"connections": 0, "url": f"http://127.0.0.1:{sock.getsockname()[1]}/v1"}

    def trickle(conn):
        with conn:
            conn.recv(65536)
            for i in range(len(data)):
                try:
                    conn.sendall(data[i : i + 1])
                except OSError:  # the client gave up
                    return
                time.sleep(interval)

    def accept():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            stats["connections"] += 1
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield stats
    finally:
        sock.close()


def test_timeout_is_a_deadline_for_the_whole_attempt_not_per_read():
    with trickling(interval=0.1) as server:  # the whole answer would take ~15 s
        with OpenAIBackend(server["url"], "m", timeout=1, max_retries=1, backoff=0.01) as client:
            t0 = time.monotonic()
            gens = client.generate([CONV], SamplingParams())
            elapsed = time.monotonic() - t0
        assert server["connections"] == 2
    assert (
        gens[0].finish_reason == "error"
        and "timed out after 1" in gens[0].error
        and "2 attempts" in gens[0].error
    )
    assert 2.0 <= elapsed < 2.5, elapsed  # two 1 s deadlines + <= 0.01 s backoff


def test_a_reply_the_server_cut_at_max_tokens_is_recorded_as_truncated(tiny):
    """`arena serve` stops at max_tokens with finish_reason "length"; through the OpenAI
    backend the LLM agent records it on the attempt and, with on_truncated="invalid", rejects it."""
    import numpy as np

    import games
    from agents.base import PendingTurn
    from agents.llm_agent import LLMAgent, LLMAgentConfig

    backend, server = tiny
    env = games.make("tic_tac_toe")
    env.reset(seed=0)
    turn = PendingTurn("m0", env, env.agent_selection, np.random.default_rng(0))
    cfg = LLMAgentConfig(
        max_new_tokens=1, max_retries=1, fallback="random", on_truncated="invalid", seed=0
    )
    eos = backend.tokenizer.eos_token_id
    with OpenAIBackend(server.url, "tiny-llama", timeout=30) as client:
        (rec,) = LLMAgent("llm", client, cfg).act([turn])
    assert len(rec.attempts) == 2 and rec.finish_reason == rec.attempts[-1].finish_reason
    for a in rec.attempts:
        assert a.finish_reason == ("stop" if a.token_ids == [eos] else "length")
        if a.finish_reason == "length":
            assert a.error.startswith("truncated: ")
