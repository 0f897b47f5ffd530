"""`arena serve`: any of our backends behind an OpenAI-compatible HTTP endpoint.

    arena serve MODEL [--host 127.0.0.1] [--port 8000] [--backend transformers|vllm]

`serve(backend, host, port, model_name)` runs a stdlib `ThreadingHTTPServer` (no web
framework needed). Concurrent requests are micro-batched: a single worker thread takes
the first waiting request, collects more for up to `batch_wait` seconds (or until
`max_batch`), and answers them with one `backend.generate` call per distinct set of
sampling parameters, so many clients (e.g. the arena's `OpenAIBackend` with 16 requests
in flight) are served at batched throughput.

Endpoints
    GET  /v1/models             {"object": "list", "data": [{"id": MODEL, ...}]}
    GET  /health                {"status": "ok"}
    POST /v1/chat/completions   the standard chat-completion request and response

Request fields honoured: model (must match the served name when given), messages (role +
string content, or a list of {"type": "text"} parts), max_tokens / max_completion_tokens
(default 256), temperature (default 1.0), top_p, seed, n (1 only), logprobs (sampled-token
logprobs; top_logprobs must be 0), constrained decoding by `structured_outputs:
{"choice": [...]}` (vLLM >= 0.10.2 style) or `guided_choice: [...]` (older vLLM style).
Other fields are ignored, as vLLM does (e.g. `return_token_ids`: ids are always returned);
`stream: true` is refused.

Response extension fields (the names vLLM uses with `return_token_ids`):
    choices[0].token_ids   completion token ids
    prompt_token_ids       chat-templated prompt token ids
`choices[0].logprobs.content[i]` holds {token, logprob, bytes, top_logprobs: []} for
each completion token; token strings are decoded with `backend.tokenizer` when the
backend has one.

Errors are JSON {"error": {"message", "type", "code"}}: 400 for a malformed request, 404
for an unknown path or model, 500 when the backend raises (its message included). When a
micro-batch fails, its requests are retried one by one so a single bad request cannot
fail its neighbours.
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import threading
import time
import uuid
from dataclasses import astuple, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agents.backend import Backend, Generation, SamplingParams, content_text

log = logging.getLogger(__name__)

MAX_BODY = 32 * 2**20  # bytes
DEFAULT_MAX_TOKENS = 256


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    """One parsed chat-completion request."""

    messages: list[dict]  # [{"role", "content"}] with string contents
    params: SamplingParams
    allowed: list[str] | None  # constrained-decoding choices
    logprobs: bool  # include choices[0].logprobs in the response


@dataclass
class _Job:
    request: Request
    done: threading.Event = field(default_factory=threading.Event)
    result: Generation | None = None
    error: str | None = None


def parse_request(body, model_name: str) -> Request:
    """Validate a chat-completion request body; raises RequestError(400/404) with the reason."""
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(404, f"model {model!r} is not served here; this server serves {model_name!r}")
    if body.get("stream"):
        raise RequestError(400, "stream=true is not supported; send stream=false")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of {role, content} objects")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(400, f"messages[{i}] must be an object with a string 'role'")
        clean.append({"role": m["role"], "content": _content(m.get("content"), i)})
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
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
    n = body.get("n", 1)
    if n not in (None, 1) or isinstance(n, bool):
        raise RequestError(400, f"only n=1 is supported, got n={n!r}")
    logprobs = body.get("logprobs") or False
    if not isinstance(logprobs, bool):
        raise RequestError(400, f"logprobs must be true or false, got {logprobs!r}")
    if body.get("top_logprobs") not in (None, 0):
        raise RequestError(400, "top_logprobs > 0 is not supported (only the sampled token's logprob)")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise RequestError(400, "response_format other than {'type': 'text'} is not supported; use structured_outputs.choice")
    params = SamplingParams(max_new_tokens=int(max_tokens), temperature=float(temperature), top_p=float(top_p), seed=seed)
    return Request(clean, params, _choices(body), logprobs)


def _content(content, i: int) -> str:
    try:
        return content_text(content)
    except ValueError:
        raise RequestError(400, f"messages[{i}].content must be a string or a list of text parts") from None


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
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise RequestError(400, f"{where} must be a non-empty list of non-empty strings")
    return choices


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(body: dict, key: str, default: float) -> float:
    x = body.get(key)
    if x is None:
        return default
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise RequestError(400, f"{key} must be a number, got {x!r}")
    return float(x)


class Batcher:
    """Collects concurrent requests into batches for one backend (one worker thread)."""

    def __init__(self, backend: Backend, max_batch: int = 64, batch_wait: float = 0.01):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if batch_wait < 0:
            raise ValueError(f"batch_wait must be >= 0 seconds, got {batch_wait}")
        self.backend, self.max_batch, self.batch_wait = backend, max_batch, batch_wait
        self.batches = 0  # backend.generate calls made
        self.largest_batch = 0
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, request: Request) -> Generation:
        """Generate for one request (blocks until its batch is done); raises RuntimeError on backend failure."""
        job = _Job(request)
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise RuntimeError(job.error)
        return job.result

    def close(self) -> None:
        self._queue.put(None)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, stop = [job], False
            deadline = time.monotonic() + self.batch_wait
            while len(jobs) < self.max_batch:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                jobs.append(nxt)
            groups: dict[tuple, list[_Job]] = {}
            for j in jobs:  # one generate call per distinct sampling parameters
                groups.setdefault(astuple(j.request.params), []).append(j)
            for group in groups.values():
                self._run(group)
            if stop:
                return

    def _run(self, jobs: list[_Job]) -> None:
        reqs = [j.request for j in jobs]
        allowed = [r.allowed for r in reqs] if any(r.allowed for r in reqs) else None
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(jobs))
        try:
            gens = self.backend.generate([r.messages for r in reqs], reqs[0].params, allowed)
            if len(gens) != len(jobs):
                raise RuntimeError(f"backend returned {len(gens)} generations for {len(jobs)} conversations")
        except Exception as e:  # noqa: BLE001 - reported to the client as a 500
            if len(jobs) > 1:  # isolate the culprit: retry one by one
                for j in jobs:
                    self._run([j])
                return
            log.warning("backend failed: %s: %s", type(e).__name__, e)
            jobs[0].error = f"backend failed: {type(e).__name__}: {e}"
            jobs[0].done.set()
            return
        for j, g in zip(jobs, gens):
            j.result = g
            j.done.set()


class ArenaServer(ThreadingHTTPServer):
    """The HTTP server; `stats` counts requests for monitoring (and tests)."""

    daemon_threads = True

    def __init__(self, address, backend: Backend, model_name: str, max_batch: int, batch_wait: float):
        super().__init__(address, _Handler)
        self.backend = backend
        self.model_name = model_name
        self.tokenizer = getattr(backend, "tokenizer", None)
        self.batcher = Batcher(backend, max_batch, batch_wait)
        self.stats = {"requests": 0, "in_flight": 0, "peak_in_flight": 0, "errors": 0}
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """Base URL for clients, e.g. http://127.0.0.1:8000/v1."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def count(self, key: str, delta: int = 1) -> None:
        with self._lock:
            self.stats[key] += delta
            self.stats["peak_in_flight"] = max(self.stats["peak_in_flight"], self.stats["in_flight"])

    def close(self) -> None:
        """Stop serving (call from another thread than serve_forever) and stop the batcher."""
        self.shutdown()
        self.server_close()
        self.batcher.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    server: ArenaServer

    def log_message(self, format, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/models":
            model = {"id": self.server.model_name, "object": "model", "created": 0, "owned_by": "selfplay-arena"}
            self._send(200, {"object": "list", "data": [model]})
        elif path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:
        if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
            self.close_connection = True  # the body is left unread
            self._error(404, f"no such endpoint: POST {self.path}")
            return
        self.server.count("requests")
        self.server.count("in_flight")
        try:
            request = parse_request(self._read_json(), self.server.model_name)
            try:
                gen = self.server.batcher.submit(request)
            except RuntimeError as e:
                raise RequestError(500, str(e)) from None
            if gen.finish_reason == "error":
                raise RequestError(500, "backend returned an error generation")
            self._send(200, self._response(request, gen))
        except RequestError as e:
            self.server.count("errors")
            self._error(e.status, str(e))
        finally:
            self.server.count("in_flight", -1)

    def _read_json(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise RequestError(400, "a Content-Length header is required")
        if int(length) > MAX_BODY:
            self.close_connection = True
            raise RequestError(413, f"request body is larger than {MAX_BODY} bytes")
        raw = self.rfile.read(int(length))
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}") from None

    def _response(self, request: Request, gen: Generation) -> dict:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": gen.text},
            "finish_reason": gen.finish_reason,
            "logprobs": None,
            "token_ids": list(gen.token_ids),
        }
        if request.logprobs:
            tokens = self._token_strings(gen)
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                    for t, lp in zip(tokens, gen.logprobs)
                ]
            }
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.server.model_name,
            "choices": [choice],
            "prompt_token_ids": list(gen.prompt_token_ids),
            "usage": {
                "prompt_tokens": len(gen.prompt_token_ids),
                "completion_tokens": len(gen.token_ids),
                "total_tokens": len(gen.prompt_token_ids) + len(gen.token_ids),
            },
        }

    def _token_strings(self, gen: Generation) -> list[str]:
        tok = self.server.tokenizer
        if tok is None or len(gen.token_ids) != len(gen.logprobs):
            return [""] * len(gen.logprobs)
        return [tok.decode([t]) for t in gen.token_ids]

    def _error(self, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. its timeout)
            self.close_connection = True


def make_server(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    max_batch: int = 64,
    batch_wait: float = 0.01,
) -> ArenaServer:
    """A bound, not yet running server (port 0 picks a free port; see `server.url`).

    Run it with `server.serve_forever()` (e.g. in a thread) and stop it with `server.close()`.
    """
    return ArenaServer((host, port), backend, model_name or getattr(backend, "name", "model"), max_batch, batch_wait)


def serve(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    max_batch: int = 64,
    batch_wait: float = 0.01,
) -> None:
    """Serve `backend` until interrupted (Ctrl-C)."""
    server = make_server(backend, host, port, model_name, max_batch, batch_wait)
    print(f"Serving {server.model_name!r} at {server.url} (POST /chat/completions, GET /models); Ctrl-C to stop", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.batcher.close()


def build_backend(model: str, kind: str = "transformers") -> Backend:
    """A local backend for a model name (see `agents.models`)."""
    from agents.models import check_name

    check_name(model)
    if kind == "transformers":
        from agents.transformers_backend import TransformersBackend

        return TransformersBackend(model)
    if kind == "vllm":
        from agents.vllm_backend import VLLMBackend

        return VLLMBackend(model)
    raise ValueError(f"unknown backend {kind!r}; choose transformers or vllm")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="arena serve", description="serve a model as an OpenAI-compatible endpoint")
    p.add_argument("model", help="smollm2-135m, tiny-llama[:SEED], a local folder or a hub id")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    p.add_argument("--max-batch", type=int, default=64, help="most requests per backend call")
    p.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long to collect a batch")
    return p


def main(args: argparse.Namespace | list[str] | None = None) -> None:
    """`arena serve`: takes parsed arguments (from arena.cli) or an argv list."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(args)
    backend = build_backend(args.model, args.backend)
    serve(
        backend,
        args.host,
        args.port,
        model_name=args.model,
        max_batch=getattr(args, "max_batch", 64),
        batch_wait=getattr(args, "batch_wait_ms", 10.0) / 1000,
    )


if __name__ == "__main__":
    main()
