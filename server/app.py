"""The ASGI app of `arena serve` (Starlette): the OpenAI-compatible endpoints over a backend.

    app = make_app(backend, ServeOptions(model_name="tiny-llama", api_key="s3cret"))
    app.state.batcher, app.state.stats, app.state.context    # for monitoring (and tests)

Any ASGI server can run it; `server.serve` runs it on uvicorn with the connection limits.

Endpoints
    GET  /v1/models             {"object": "list", "data": [{"id": MODEL, ...}]}
    GET  /health                {"status": "ok"}
    POST /v1/chat/completions   the standard chat-completion request and response
    POST /v1/completions        the (legacy) text completion: raw prompts, no chat template
                                (needs a backend with `complete`: the transformers one)

What each request may hold, and what comes back (logprobs, `n`, streaming as server-sent
events), is in `server.openai_api`; concurrent requests are micro-batched by
`server.batcher`.

Errors are JSON {"error": {"message", "type", "code"}}: 400 for a malformed request (or one
the backend refuses with a ValueError, or whose max_tokens the model's context cannot
hold), 401 without the API key (`Authorization: Bearer KEY`, compared with
hmac.compare_digest), 404 for an unknown path or model, 405 for a known path with another
method, 408 for a body that did not arrive within `read_timeout` seconds of the request's
head, 413 for a body over MAX_BODY, 429 when the request queue is full (with
`Retry-After: 1`), 500 when the backend fails otherwise (its message included). After a
408 or 413, and after a refusal before the body is read (401, 404, 405) when that body is
chunked or over DISCARD_LIMIT, the connection is closed; otherwise it carries the next
request (the server drops the unread body).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging

from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    SimpleUser,
)
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import ClientDisconnect, HTTPConnection
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agents.backend import Backend
from server.batcher import Batcher
from server.openai_api import (
    Request,
    RequestError,
    chunks,
    fit_context,
    parse_chat,
    parse_completion,
    response,
)
from server.options import ServeOptions

log = logging.getLogger(__name__)

MAX_BODY = 32 * 2**20  # bytes
DISCARD_LIMIT = 2**20  # bytes of a refused request's body dropped to keep its connection
CLOSE_AFTER = (408, 413)  # statuses after which the connection is closed
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class Stats(dict):
    """Counters for monitoring (and tests): requests, in_flight, errors, connections,
    timeouts, and the peaks of in_flight and connections. Counted in the event loop."""

    def __init__(self):
        super().__init__(
            requests=0,
            in_flight=0,
            peak_in_flight=0,
            errors=0,
            connections=0,
            peak_connections=0,
            timeouts=0,
        )

    def count(self, key: str, delta: int = 1) -> None:
        self[key] += delta
        for now, peak in (("in_flight", "peak_in_flight"), ("connections", "peak_connections")):
            self[peak] = max(self[peak], self[now])


def make_app(backend: Backend, options: ServeOptions) -> Starlette:
    """The ASGI app serving `backend` (its batcher's worker thread starts now).

    Args:
        backend: what generates (`generate`; `complete` for /v1/completions).
        options: the served name, micro-batching, the API key, the queue bound and the
            read deadline of a request's body (`max_connections` is the server's).

    Returns:
        The app; `app.state` holds `batcher` (close it when done), `stats` and `context`
        (the model's context in tokens, or None).
    """
    service = _Service(backend, options)
    middleware = []
    if options.api_key:
        middleware.append(
            Middleware(
                AuthenticationMiddleware,
                backend=_BearerKey(options.api_key),
                on_error=_unauthorized,
            )
        )
    app = Starlette(
        routes=[
            Route("/v1/models", service.models, methods=["GET"]),
            Route("/health", service.health, methods=["GET"]),
            Route("/v1/chat/completions", service.chat, methods=["POST"]),
            Route("/v1/completions", service.completion, methods=["POST"]),
        ],
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.state.batcher, app.state.stats = service.batcher, service.stats
    app.state.context = service.context
    return app


class _Service:
    """The endpoints over one backend, its batcher and counters."""

    def __init__(self, backend: Backend, options: ServeOptions):
        self.backend, self.options = backend, options
        self.tokenizer = getattr(backend, "tokenizer", None)
        self.context = context_length(backend) if hasattr(backend, "encode") else None
        self.batcher = Batcher(backend, options.max_batch, options.batch_wait, options.max_queue)
        self.stats = Stats()

    async def models(self, request: HTTPRequest) -> Response:
        model = {
            "id": self.options.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "selfplay-arena",
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def health(self, request: HTTPRequest) -> Response:
        return JSONResponse({"status": "ok"})

    async def chat(self, request: HTTPRequest) -> Response:
        return await self._answer(request, parse_chat)

    async def completion(self, request: HTTPRequest) -> Response:
        return await self._answer(request, parse_completion)

    async def _answer(self, http: HTTPRequest, parse) -> Response:
        """Read, check, queue and answer one completion request."""
        self.stats.count("requests")
        self.stats.count("in_flight")
        try:
            request = parse(await self._read_json(http), self.options.model_name)
            if request.kind == "text" and not hasattr(self.backend, "complete"):
                raise RequestError(
                    400,
                    f"this server's backend ({type(self.backend).__name__}) serves chat completions only",
                )
            self.batcher.check_room()  # before tokenizing: a full queue costs no work
            if self.context is not None:
                lengths = await run_in_threadpool(self._prompt_lengths, request)
                request = fit_context(request, lengths, self.context)
            gens = await self.batcher.generate(request)
            args = (request, gens, self.options.model_name, self.tokenizer)
            if request.stream:
                return StreamingResponse(_events(chunks(*args)), headers=SSE_HEADERS)
            return JSONResponse(await run_in_threadpool(response, *args))
        except RequestError as e:
            self.stats.count("errors")
            return error_response(e.status, str(e))
        finally:
            self.stats.count("in_flight", -1)

    def _prompt_lengths(self, request: Request) -> list[int]:
        """Token counts of the request's prompts, as the backend will encode them."""
        if request.kind == "chat":
            return [len(self.backend.encode(p)) for p in request.prompts]
        return [len(self.tokenizer(p)["input_ids"]) for p in request.prompts]

    async def _read_json(self, http: HTTPRequest):
        """The request's JSON body, read within `read_timeout` seconds and MAX_BODY bytes."""
        length = http.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY:
            raise RequestError(413, f"request body is larger than {MAX_BODY} bytes")
        body = bytearray()
        timeout = self.options.read_timeout
        try:
            async with asyncio.timeout(timeout):
                async for chunk in http.stream():
                    body += chunk
                    if len(body) > MAX_BODY:
                        raise RequestError(413, f"request body is larger than {MAX_BODY} bytes")
        except TimeoutError:
            self.stats.count("timeouts")
            raise RequestError(408, f"the request did not arrive within {timeout:g} s") from None
        except ClientDisconnect:
            raise RequestError(400, "the connection closed before the whole body arrived") from None
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}") from None


def _events(bodies):
    """Server-sent events: one `data:` line per chunk body, `data: [DONE]` last."""
    for body in bodies:
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"


def error_response(
    status: int, message: str, code: str | None = None, headers: dict | None = None
) -> JSONResponse:
    """The JSON error body {"error": {"message", "type", "code"}} with its status."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    headers = dict(headers or {})
    if status == 429:
        headers["Retry-After"] = "1"
    if status in CLOSE_AFTER:
        headers["Connection"] = "close"
    error = {"message": message, "type": kind, "code": code or status}
    return JSONResponse({"error": error}, status, headers)


def _refused(conn: HTTPConnection, status: int, message: str, **kwargs) -> JSONResponse:
    """An error before the body is read: the connection is closed unless the body is small
    enough to drop (a chunked body or one over DISCARD_LIMIT could hold it long)."""
    length = conn.headers.get("content-length", "0")
    small = "transfer-encoding" not in conn.headers and length.isdigit()
    reply = error_response(status, message, **kwargs)
    if not (small and int(length) <= DISCARD_LIMIT):
        reply.headers["Connection"] = "close"
    return reply


class _BearerKey(AuthenticationBackend):
    """Every request needs `Authorization: Bearer KEY` (compared in constant time)."""

    def __init__(self, key: str):
        self.key = key.encode()

    async def authenticate(self, conn: HTTPConnection):
        scheme, _, token = conn.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode("latin-1", "replace"), self.key
        ):
            return AuthCredentials(["authenticated"]), SimpleUser("client")
        raise AuthenticationError(
            "a valid API key is required: send the header 'Authorization: Bearer KEY'"
        )


def _unauthorized(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    return _refused(
        conn, 401, str(exc), code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


async def _http_error(request: HTTPRequest, exc: HTTPException) -> Response:
    """Starlette's own refusals (404 no such path, 405 wrong method) as JSON errors."""
    what = "no such endpoint" if exc.status_code == 404 else exc.detail.lower()
    message = f"{what}: {request.method} {request.url.path}"
    return _refused(request, exc.status_code, message, headers=exc.headers)


async def _internal_error(request: HTTPRequest, exc: Exception) -> Response:
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


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
