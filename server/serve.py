"""`arena serve`: any of our backends behind an OpenAI-compatible HTTP endpoint.

    arena serve MODEL [--host 127.0.0.1] [--port 8000] [--backend transformers|vllm]
                      [--api-key KEY] [--max-queue 64] [--max-connections 128] [--read-timeout 30]

`serve(backend, host, port, model_name)` runs a stdlib `ThreadingHTTPServer` (no web
framework needed). Concurrent requests are micro-batched: a single worker thread takes
the first waiting request, collects more for up to `batch_wait` seconds (or until
`max_batch`), and answers them with one backend call (`generate`, or `complete` for raw
text prompts) per distinct set of sampling parameters, so many clients (e.g. the arena's `OpenAIBackend` with 16 requests
in flight) are served at batched throughput.

Endpoints
    GET  /v1/models             {"object": "list", "data": [{"id": MODEL, ...}]}
    GET  /health                {"status": "ok"}
    POST /v1/chat/completions   the standard chat-completion request and response
    POST /v1/completions        the (legacy) text completion: raw prompts, no chat template
                                (needs a backend with `complete`: the transformers one)

What each request may hold, and what comes back (logprobs, `n`, streaming as server-sent
events), is in `server.openai_api`. The `n` completions of a request are queued together,
so they are generated in one batch.

Errors are JSON {"error": {"message", "type", "code"}}: 400 for a malformed request (or one
the backend refuses with a ValueError, or whose max_tokens the model's context cannot
hold), 401 without the API key, 404 for an unknown path or model, 408 for a body that
missed the read deadline, 413 for a body over MAX_BODY, 429 when the request queue is
full, 500 when the backend fails otherwise (its message included). When a micro-batch
fails, its requests are retried one by one so a single bad request cannot fail its
neighbours.

Exposure limits (docs/guides/serve.md says what is left to a reverse proxy):
    api_key          every endpoint needs `Authorization: Bearer KEY` (hmac.compare_digest)
    max_queue        requests waiting or generating; one more is a 429 at once
    max_connections  connections served at once, one thread each; more wait in the listen
                     backlog, so threads and request bodies in memory stay bounded
    read_timeout     a whole request (headers and body) must arrive within it, counted from
                     the end of the previous response: a slow or stalled client, or an idle
                     keep-alive connection, is closed after it
"""

from __future__ import annotations

import argparse
import hmac
import io
import json
import logging
import os
import queue
import socket
import threading
import time
from dataclasses import astuple, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agents.backend import Backend, Generation, SamplingParams
from agents.models import check_name
from core.machine import PRECISIONS
from server.openai_api import (
    Request,
    RequestError,
    chunks,
    fit_context,
    parse_chat,
    parse_completion,
    response,
)
from server.options import add_arguments

log = logging.getLogger(__name__)

MAX_BODY = 32 * 2**20  # bytes
DISCARD_LIMIT = 2**20  # bytes of a refused request's body read to keep its connection
API_KEY_ENV = "ARENA_API_KEY"  # the API key when --api-key is not given
ENDPOINTS = {"/v1/chat/completions": parse_chat, "/v1/completions": parse_completion}


@dataclass
class _Job:
    kind: str  # "chat" or "text"
    prompt: list[dict] | str
    params: SamplingParams
    allowed: list[str] | None
    done: threading.Event = field(default_factory=threading.Event)
    result: Generation | None = None
    error: RequestError | None = None


class Batcher:
    """Collects concurrent requests into batches for one backend (one worker thread)."""

    def __init__(
        self, backend: Backend, max_batch: int = 64, batch_wait: float = 0.01, max_queue: int = 64
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if batch_wait < 0:
            raise ValueError(f"batch_wait must be >= 0 seconds, got {batch_wait}")
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        self.backend, self.max_batch, self.batch_wait = backend, max_batch, batch_wait
        self.max_queue = max_queue
        self.batches = 0  # backend calls made
        self.largest_batch = 0
        self.pending = 0  # requests waiting or generating
        self.peak_pending = 0
        self._pending_lock = threading.Lock()
        self._queue: queue.Queue[list[_Job] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, request: Request) -> list[Generation]:
        """`request.n` generations per prompt, prompt-major (blocks until done).

        Raises RequestError: 429 at once when `max_queue` requests are already waiting or
        generating; 400 when the backend refuses the request (ValueError), else 500.
        """
        with self._pending_lock:
            self.check_room()
            self.pending += 1
            self.peak_pending = max(self.peak_pending, self.pending)
        try:
            jobs = [
                _Job(request.kind, p, request.params, request.allowed)
                for p in request.prompts
                for _ in range(request.n)
            ]
            self._queue.put(jobs)  # one item: a request's jobs are batched together
            for j in jobs:
                j.done.wait()
                if j.error is not None:
                    raise j.error
            return [j.result for j in jobs]
        finally:
            with self._pending_lock:
                self.pending -= 1

    def check_room(self) -> None:
        """Raises RequestError(429) when `max_queue` requests are waiting or generating."""
        if self.pending >= self.max_queue:
            raise RequestError(
                429,
                f"the server is busy: {self.pending} requests are queued (--max-queue {self.max_queue}); retry later",
            )

    def close(self) -> None:
        self._queue.put(None)

    def _loop(self) -> None:
        while True:
            jobs = self._queue.get()
            if jobs is None:
                return
            stop = False
            deadline = time.monotonic() + self.batch_wait
            while len(jobs) < self.max_batch:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                jobs = jobs + more
            groups: dict[tuple, list[_Job]] = {}
            for j in jobs:  # one backend call per kind and distinct sampling parameters
                groups.setdefault((j.kind, astuple(j.params)), []).append(j)
            for group in groups.values():
                self._run(group)
            if stop:
                return

    def _run(self, jobs: list[_Job]) -> None:
        allowed = [j.allowed for j in jobs] if any(j.allowed for j in jobs) else None
        run = self.backend.generate if jobs[0].kind == "chat" else self.backend.complete
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(jobs))
        try:
            gens = run([j.prompt for j in jobs], jobs[0].params, allowed)
            if len(gens) != len(jobs):
                raise RuntimeError(
                    f"backend returned {len(gens)} generations for {len(jobs)} prompts"
                )
        except Exception as e:  # noqa: BLE001 - reported to the client
            if len(jobs) > 1:  # isolate the culprit: retry one by one
                for j in jobs:
                    self._run([j])
                return
            log.warning("backend failed: %s: %s", type(e).__name__, e)
            if isinstance(e, ValueError):  # the backend's own check of the request
                jobs[0].error = RequestError(400, str(e))
            else:
                jobs[0].error = RequestError(500, f"backend failed: {type(e).__name__}: {e}")
            jobs[0].done.set()
            return
        for j, g in zip(jobs, gens):
            if g.finish_reason == "error":
                j.error = RequestError(500, f"backend returned an error generation: {g.error}")
            j.result = g
            j.done.set()


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side with a deadline for the whole request, not per read.

    `deadline` (a `time.monotonic()` value) is set before each request; every read waits at
    most until then, so a client that sends a byte now and then cannot hold the connection.
    Between reads the socket keeps `timeout` (which bounds each write of the response).
    """

    def __init__(self, sock: socket.socket, timeout: float):
        self.sock, self.timeout = sock, timeout
        self.deadline = time.monotonic() + timeout
        sock.settimeout(timeout)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("read deadline passed")
        self.sock.settimeout(left)
        try:
            return self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.timeout)


class ArenaServer(ThreadingHTTPServer):
    """The HTTP server; `stats` counts requests for monitoring (and tests).

    At most `max_connections` connections are served at once, one thread each; the next
    ones wait in the kernel's listen backlog until a thread is free.
    """

    daemon_threads = True
    request_queue_size = 1024  # the listen backlog (the kernel caps it at net.core.somaxconn)

    def __init__(
        self,
        address,
        backend: Backend,
        model_name: str,
        max_batch: int,
        batch_wait: float,
        api_key: str | None = None,
        max_queue: int = 64,
        max_connections: int = 128,
        read_timeout: float = 30.0,
    ):
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        if not read_timeout > 0:
            raise ValueError(f"read_timeout must be > 0 seconds, got {read_timeout}")
        super().__init__(address, _Handler)
        self.backend = backend
        self.model_name = model_name
        self.tokenizer = getattr(backend, "tokenizer", None)
        self.context = context_length(backend) if hasattr(backend, "encode") else None
        self.api_key = api_key or None
        self.max_connections, self.read_timeout = max_connections, read_timeout
        self.batcher = Batcher(backend, max_batch, batch_wait, max_queue)
        self.stats = {
            "requests": 0,
            "in_flight": 0,
            "peak_in_flight": 0,
            "errors": 0,
            "connections": 0,
            "peak_connections": 0,
            "timeouts": 0,
        }
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._closing = False

    @property
    def url(self) -> str:
        """Base URL for clients, e.g. http://127.0.0.1:8000/v1."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def count(self, key: str, delta: int = 1) -> None:
        with self._lock:
            self.stats[key] += delta
            for now, peak in (("in_flight", "peak_in_flight"), ("connections", "peak_connections")):
                self.stats[peak] = max(self.stats[peak], self.stats[now])

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries the API key (always, when there is none)."""
        if self.api_key is None:
            return True
        scheme, _, token = (header or "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode("latin-1", "replace"), self.api_key.encode()
        )

    def process_request(self, request, client_address) -> None:
        """Start the connection's thread once fewer than `max_connections` are running."""
        while not self._slots.acquire(timeout=0.1):
            if self._closing:
                self.shutdown_request(request)
                return
        self.count("connections")
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        self.count("connections", -1)
        self._slots.release()

    def close(self) -> None:
        """Stop serving (call from another thread than serve_forever) and stop the batcher."""
        self._closing = True
        self.shutdown()
        self.server_close()
        self.batcher.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    server: ArenaServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # replaced by one that keeps the read deadline
        self.reader = _DeadlineReader(self.connection, self.server.read_timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        """One request, which has `read_timeout` seconds from now to arrive whole (an idle
        keep-alive connection is closed when they pass)."""
        self.reader.deadline = time.monotonic() + self.server.read_timeout
        try:
            super().handle_one_request()
        except (ConnectionResetError, BrokenPipeError):  # the client went away
            self.close_connection = True

    def log_message(self, format, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def log_error(self, format, *args) -> None:
        if args and isinstance(args[-1], TimeoutError):
            self.server.count("timeouts")
        log.debug("%s %s", self.address_string(), format % args)

    def _authorized(self) -> bool:
        if self.server.authorized(self.headers.get("Authorization")):
            return True
        self._discard_body()
        self._error(
            401,
            "a valid API key is required: send the header 'Authorization: Bearer KEY'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/models":
            model = {
                "id": self.server.model_name,
                "object": "model",
                "created": 0,
                "owned_by": "selfplay-arena",
            }
            self._send(200, {"object": "list", "data": [model]})
        elif path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:
        if not self._authorized():
            return
        parse = ENDPOINTS.get(self.path.split("?")[0].rstrip("/"))
        if parse is None:
            self._discard_body()
            self._error(404, f"no such endpoint: POST {self.path}")
            return
        self.server.count("requests")
        self.server.count("in_flight")
        try:
            request = parse(self._read_json(), self.server.model_name)
            if request.kind == "text" and not hasattr(self.server.backend, "complete"):
                raise RequestError(
                    400,
                    f"this server's backend ({type(self.server.backend).__name__}) serves chat completions only",
                )
            self.server.batcher.check_room()  # before tokenizing: a full queue costs no work
            if self.server.context is not None:
                request = fit_context(request, self._prompt_lengths(request), self.server.context)
            gens = self.server.batcher.submit(request)
            args = (request, gens, self.server.model_name, self.server.tokenizer)
            if request.stream:
                self._send_events(chunks(*args))
            else:
                self._send(200, response(*args))
        except RequestError as e:
            self.server.count("errors")
            headers = {"Retry-After": "1"} if e.status == 429 else None
            self._error(e.status, str(e), headers=headers)
        finally:
            self.server.count("in_flight", -1)

    def _prompt_lengths(self, request) -> list[int]:
        """Token counts of the request's prompts, as the backend will encode them."""
        backend = self.server.backend
        if request.kind == "chat":
            return [len(backend.encode(p)) for p in request.prompts]
        return [len(self.server.tokenizer(p)["input_ids"]) for p in request.prompts]

    def _content_length(self) -> int | None:
        length = self.headers.get("Content-Length")
        return int(length) if length is not None and length.isdigit() else None

    def _discard_body(self) -> None:
        """Read and drop the body of a request that is refused before it is read (so the
        connection can carry the next one); close the connection when that is not possible
        or the body is over DISCARD_LIMIT."""
        length = self._content_length()
        if length is None or length > DISCARD_LIMIT:
            self.close_connection = True
            return
        try:
            while length > 0:
                chunk = self.rfile.read(min(length, 2**16))
                if not chunk:
                    break
                length -= len(chunk)
        except TimeoutError:
            pass
        if length > 0:
            self.close_connection = True

    def _read_json(self):
        length = self._content_length()
        if length is None:
            self.close_connection = True
            raise RequestError(400, "a Content-Length header is required")
        if length > MAX_BODY:
            self.close_connection = True
            raise RequestError(413, f"request body is larger than {MAX_BODY} bytes")
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            self.server.count("timeouts")
            raise RequestError(
                408, f"the request did not arrive within {self.server.read_timeout:g} s"
            ) from None
        if len(raw) < length:
            self.close_connection = True
            raise RequestError(400, "the connection closed before the whole body arrived")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}") from None

    def _error(
        self, status: int, message: str, code: str | None = None, headers: dict | None = None
    ) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        error = {"message": message, "type": kind, "code": code or status}
        self._send(status, {"error": error}, headers)

    def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. its timeout)
            self.close_connection = True

    def _send_events(self, events) -> None:
        """Server-sent events, `data: [DONE]` last, in chunked transfer encoding (keep-alive)."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for data in [*(json.dumps(e) for e in events), "[DONE]"]:
                line = f"data: {data}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def context_length(backend: Backend) -> int | None:
    """The model's context in tokens (prompt plus completion), or None when unknown.

    vLLM: the engine's `max_model_len`; transformers: `config.max_position_embeddings`.
    """
    engine = getattr(getattr(backend, "llm", None), "llm_engine", None)
    config = getattr(engine, "model_config", None) or getattr(
        getattr(engine, "vllm_config", None), "model_config", None
    )
    if config is not None:
        return int(config.max_model_len)
    config = getattr(getattr(backend, "model", None), "config", None)
    length = getattr(config, "max_position_embeddings", None)
    return int(length) if isinstance(length, int) else None


def make_server(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    max_batch: int = 64,
    batch_wait: float = 0.01,
    api_key: str | None = None,
    max_queue: int = 64,
    max_connections: int = 128,
    read_timeout: float = 30.0,
) -> ArenaServer:
    """A bound, not yet running server (port 0 picks a free port; see `server.url`).

    Run it with `server.serve_forever()` (e.g. in a thread) and stop it with `server.close()`.

    Args:
        backend: what generates.
        host, port: where to listen.
        model_name: the name clients ask for (default: the backend's).
        max_batch, batch_wait: micro-batching (see `Batcher`).
        api_key: when given, every request needs `Authorization: Bearer api_key` (else 401).
        max_queue: most requests waiting or generating; more are answered 429 at once.
        max_connections: most connections served at once, one thread each.
        read_timeout: seconds a client has to send a whole request (408 or closed after).

    Returns:
        The server.
    """
    return ArenaServer(
        (host, port),
        backend,
        model_name or getattr(backend, "name", "model"),
        max_batch,
        batch_wait,
        api_key,
        max_queue,
        max_connections,
        read_timeout,
    )


def serve(backend: Backend, host: str = "127.0.0.1", port: int = 8000, **kwargs) -> None:
    """Serve `backend` until interrupted (Ctrl-C); `kwargs` as for `make_server`."""
    server = make_server(backend, host, port, **kwargs)
    print(
        f"Serving {server.model_name!r} at {server.url} (POST /chat/completions and /completions, GET /models); Ctrl-C to stop",
        flush=True,
    )
    if server.api_key is None:
        print(
            f"No API key (--api-key or ${API_KEY_ENV}): anyone who can reach {host}:{server.server_address[1]} can use this server",
            flush=True,
        )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.batcher.close()


def build_backend(model: str, kind: str = "transformers", dtype: str = "auto") -> Backend:
    """A local backend for a model name (see `agents.models`). dtype "auto": a training
    checkpoint's own training precision (`agents.play_precision`, said on stderr), else bf16
    where the CPU/GPU computes it natively (transformers; vLLM's own default otherwise);
    "float32" for logprobs that match a one-pass fp32 forward to ~1e-4 (bf16: ~5e-3)."""
    check_name(model)
    if dtype not in PRECISIONS:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(PRECISIONS)}")
    if kind == "transformers":
        from agents.models import find_checkpoint  # start-up time: torch
        from agents.play_precision import checkpoint_precision
        from agents.transformers_backend import TransformersBackend  # start-up time: torch

        ckpt = find_checkpoint(model)
        if ckpt is not None:  # a checkpoint serves in the precision it was trained in
            dtype = checkpoint_precision(ckpt, dtype).dtype
        return TransformersBackend(model, dtype=dtype)
    if kind == "vllm":
        from agents.vllm_backend import VLLMBackend  # optional: vllm

        return VLLMBackend(model, **({} if dtype == "auto" else {"dtype": dtype}))
    raise ValueError(f"unknown backend {kind!r}; choose transformers or vllm")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="arena serve", description="serve a model as an OpenAI-compatible endpoint"
    )
    add_arguments(p)
    return p


def main(args: argparse.Namespace | list[str] | None = None) -> None:
    """`arena serve`: takes parsed arguments (from cli.main) or an argv list."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(args)
    backend = build_backend(args.model, args.backend, args.dtype)
    serve(
        backend,
        args.host,
        args.port,
        model_name=args.model,
        max_batch=args.max_batch,
        batch_wait=args.batch_wait_ms / 1000,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        max_queue=args.max_queue,
        max_connections=args.max_connections,
        read_timeout=args.read_timeout,
    )


if __name__ == "__main__":
    main()
