"""`arena serve` exposed: the API key, max_tokens against the context, the bounded request
queue, the connection limit and the read deadlines, against a real server on a free
localhost port (the official `openai` client, `http.client` and raw sockets)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time

import httpx
import openai
import pytest

from agents.backend import Generation, SamplingParams
from server import serve as serve_module
from server.openai_api import Request, RequestError, fit_context
from server.serve import make_server

MESSAGES = [{"role": "user", "content": "Rock, paper or scissors?"}]
BODY = json.dumps({"messages": MESSAGES, "max_tokens": 4}).encode()


@contextlib.contextmanager
def running(backend, **kwargs):
    """A real server for `backend` on a free localhost port, in a thread."""
    server = make_server(backend, "127.0.0.1", 0, **kwargs)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield server
    finally:
        server.close()


class EchoBackend:
    """Answers each conversation with its last message reversed, `delay` seconds a batch."""

    name = "echo"

    def __init__(self, delay: float = 0.0):
        self.delay = delay

    def generate(self, conversations, params, allowed=None):
        time.sleep(self.delay)
        return [Generation(c[-1]["content"][::-1], [5], [-0.5], [1]) for c in conversations]


@pytest.fixture(scope="module")
def keyed():
    from agents.transformers_backend import TransformersBackend

    backend = TransformersBackend("tiny-llama")
    with running(backend, model_name="tiny-llama", api_key="s3cret") as server:
        yield server


def test_wrong_or_missing_key_is_401_and_the_right_key_works(keyed):
    with openai.OpenAI(base_url=keyed.url, api_key="wrong", max_retries=0, timeout=30) as bad:
        with pytest.raises(openai.AuthenticationError) as e:
            bad.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=4)
        assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    health = keyed.url.replace("/v1", "/health")
    r = httpx.get(health, timeout=10)  # no header at all
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert "Authorization: Bearer" in r.json()["error"]["message"]
    assert httpx.get(health, headers={"Authorization": "Bearer s3cret"}).json() == {"status": "ok"}
    with openai.OpenAI(base_url=keyed.url, api_key="s3cret", max_retries=0, timeout=30) as good:
        reply = good.chat.completions.create(
            model="tiny-llama", messages=MESSAGES, max_tokens=4, seed=0
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert [m.id for m in good.models.list()] == ["tiny-llama"]


def test_a_refused_post_keeps_the_connection_usable(keyed):
    conn = http.client.HTTPConnection("127.0.0.1", keyed.server_address[1], timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", BODY, {"Authorization": "Bearer nope"})
        r = conn.getresponse()
        assert r.status == 401 and json.loads(r.read())["error"]["code"] == "invalid_api_key"
        conn.request("POST", "/v1/chat/completions", BODY, {"Authorization": "Bearer s3cret"})
        r = conn.getresponse()  # the same connection: the refused body was read and dropped
        assert r.status == 200 and json.loads(r.read())["choices"]
    finally:
        conn.close()


def test_max_tokens_beyond_the_context_is_a_400(keyed):
    assert keyed.context == 2048  # tiny-llama's max_position_embeddings
    with openai.OpenAI(base_url=keyed.url, api_key="s3cret", max_retries=0, timeout=30) as client:
        for key in ("max_tokens", "max_completion_tokens"):
            with pytest.raises(openai.BadRequestError, match="context leaves") as e:
                client.chat.completions.create(model="tiny-llama", messages=MESSAGES, **{key: 2048})
            assert e.value.status_code == 400
        with pytest.raises(openai.BadRequestError, match="context leaves"):
            client.completions.create(model="tiny-llama", prompt="Once upon", max_tokens=5000)


def test_fit_context_lowers_only_the_default_max_tokens():
    def request(max_tokens: int, default: bool) -> Request:
        params = SamplingParams(max_new_tokens=max_tokens)
        return Request("text", ["p"], params, None, 1, False, False, False, default)

    assert fit_context(request(256, True), [10, 1900], 2048).params.max_new_tokens == 148
    assert fit_context(request(100, False), [1948], 2048).params.max_new_tokens == 100
    with pytest.raises(RequestError, match="at most 148"):
        fit_context(request(149, False), [1900], 2048)
    with pytest.raises(RequestError, match="shorten the prompt"):
        fit_context(request(256, True), [2048], 2048)


def test_api_key_from_flag_or_environment(monkeypatch):
    seen = []
    monkeypatch.setattr(serve_module, "build_backend", lambda *a: EchoBackend())
    monkeypatch.setattr(serve_module, "serve", lambda *a, **kw: seen.append(kw["api_key"]))
    monkeypatch.delenv("ARENA_API_KEY", raising=False)
    serve_module.main(["tiny-llama"])
    monkeypatch.setenv("ARENA_API_KEY", "from-env")
    serve_module.main(["tiny-llama"])
    serve_module.main(["tiny-llama", "--api-key", "from-flag"])
    assert seen == [None, "from-env", "from-flag"]


@pytest.mark.parametrize(
    "flag", ["--max-queue=0", "--max-connections=-1", "--read-timeout=0", "--read-timeout=inf"]
)
def test_limits_are_checked_before_the_model_loads(flag, capsys):
    with pytest.raises(SystemExit):
        serve_module.build_parser().parse_args(["tiny-llama", flag])
    assert "must be a finite number above 0" in capsys.readouterr().err


def _recv_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def _closed_silently(sock: socket.socket) -> bool:
    """The server closed the connection without a byte: end of stream, or a reset (what TCP
    sends instead when the server closes with bytes of the client's still unread)."""
    try:
        return _recv_all(sock) == b""
    except ConnectionResetError:
        return True


def test_slow_clients_are_cut_off_at_the_read_deadline_while_others_are_served():
    with running(EchoBackend(), read_timeout=1.0, max_connections=8) as server:
        address = server.server_address[:2]
        half = socket.create_connection(address, timeout=10)  # half a body, then nothing
        half.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY[:10]
        )
        silent = socket.create_connection(address, timeout=10)  # connects, never sends
        trickle = socket.create_connection(address, timeout=10)  # a byte every 0.2 s
        start = time.monotonic()
        stop = threading.Event()

        def drip():
            for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n":
                if stop.wait(0.2):
                    return
                try:
                    trickle.send(bytes([byte]))
                except OSError:
                    return

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        served = []  # meanwhile, full requests are answered at once
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while time.monotonic() - start < 0.8:
                r = client.post("/chat/completions", json={"messages": MESSAGES})
                served.append(r.status_code)
        assert served and set(served) == {200}
        answer = _recv_all(half)
        half_at = time.monotonic() - start
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer
        assert _closed_silently(silent) and _closed_silently(trickle)
        closed_at = time.monotonic() - start
        stop.set()
        assert 0.8 < half_at < 3.0 and closed_at < 3.0
        assert server.stats["timeouts"] >= 3
        for s in (half, silent, trickle):
            s.close()


def test_beyond_max_connections_a_request_is_a_503_until_stalled_ones_pass_the_deadline():
    with running(EchoBackend(), read_timeout=0.5, max_connections=2) as server:
        stalled = [
            socket.create_connection(server.server_address[:2], timeout=10) for _ in range(2)
        ]
        time.sleep(0.1)  # both accepted: every connection the server serves is taken
        start = time.monotonic()
        r = httpx.post(f"{server.url}/chat/completions", json={"messages": MESSAGES}, timeout=10)
        assert r.status_code == 503 and time.monotonic() - start < 0.4  # at once, not queued
        assert all(_closed_silently(s) for s in stalled)  # closed at the head deadline
        assert time.monotonic() - start < 2.0 and server.stats["timeouts"] == 2
        r = httpx.post(f"{server.url}/chat/completions", json={"messages": MESSAGES}, timeout=10)
        assert r.status_code == 200
        for s in stalled:
            s.close()


def test_200_concurrent_clients_with_a_queue_of_32_get_200_or_429_and_threads_stay_bounded():
    """No thread per connection: the server's threads are the serving one, the batcher's
    and at most anyio's 40 workers (`run_in_threadpool`), whatever the clients."""
    backend = EchoBackend(delay=0.2)  # 8 requests a batch: 40 requests/s at most
    statuses: list[int | str] = []
    lock = threading.Lock()
    go = threading.Event()
    peak_threads = 0

    def client(port: int) -> None:
        go.wait()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
            r = conn.getresponse()
            payload = json.loads(r.read())
            ok = "choices" in payload if r.status == 200 else "busy" in payload["error"]["message"]
            outcome = r.status if ok else f"bad body {payload}"
            if r.status == 429:
                assert r.getheader("Retry-After") == "1"
        except Exception as e:  # noqa: BLE001 - a lost or hung request fails the test below
            outcome = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        with lock:
            statuses.append(outcome)

    with running(backend, max_batch=8, max_queue=32, max_connections=256) as server:
        port = server.server_address[1]
        threads = [
            threading.Thread(target=client, args=(port,), name=f"client-{i}") for i in range(200)
        ]
        for t in threads:
            t.start()
        start = time.monotonic()
        go.set()
        while any(t.is_alive() for t in threads) and time.monotonic() - start < 60:
            others = [t for t in threading.enumerate() if not t.name.startswith("client-")]
            peak_threads = max(peak_threads, len(others) - 1)  # less this test's own
            time.sleep(0.005)
        for t in threads:
            t.join(1)
        elapsed = time.monotonic() - start
        stats, peak_queue = dict(server.stats), server.batcher.peak_pending
    assert len(statuses) == 200, "requests lost or hung"
    assert set(statuses) <= {200, 429}, [s for s in statuses if s not in (200, 429)]
    assert statuses.count(200) >= 32 and statuses.count(429) > 0
    assert peak_queue <= 32 and stats["peak_connections"] <= 200 and peak_threads <= 2 + 40
    print(
        f"200 clients, queue 32: {statuses.count(200)} x 200, "
        f"{statuses.count(429)} x 429 in {elapsed:.2f} s; peak queue {peak_queue}, "
        f"peak server threads {peak_threads}"
    )


def test_a_client_that_stops_reading_its_response_is_dropped_at_the_deadline():
    big = "x" * 6 * 2**20  # more than the kernel's socket buffers hold
    body = json.dumps({"messages": [{"role": "user", "content": big}]}).encode()
    with running(EchoBackend(), read_timeout=0.5) as server:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(server.server_address[:2])
        reader.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        deadline = time.monotonic() + 10
        while server.stats["timeouts"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stats["timeouts"] == 1
        while server.stats["connections"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stats["connections"] == 0  # dropped, though the response is unread
        reader.close()
