"""`arena serve`: any of our backends behind an OpenAI-compatible HTTP endpoint, on uvicorn.

    arena serve MODEL [--host 127.0.0.1] [--port 8000] [--backend transformers|vllm]
                      [--api-key KEY] [--max-queue 64] [--max-connections 128] [--read-timeout 30]

The endpoints, the JSON errors, the API key, the body's read deadline and size cap, the
bounded queue and the micro-batching are the ASGI app's (`make_app`, from `server.app`;
any ASGI server can run it). `make_server` binds it to a port on uvicorn (HTTP/1.1 by h11,
one event loop; the backend generates in the batcher's worker thread), with the limits
that belong to connections:

    max_connections  uvicorn's `limit_concurrency`: at most this many connections are
                     served at once; a request on one more is answered 503 Service
                     Unavailable (uvicorn's plain-text answer) and that connection closed
    read_timeout     a request's head (request line and headers) must arrive whole within
                     it, counted from the connection's start or the end of the previous
                     response, else the connection is closed: an idle keep-alive
                     connection, a silent one and one that trickles bytes alike. Its body
                     then has as long again (408, the app's `read_timeout`), and a
                     client that stops reading a response is dropped after it

    server = make_server(backend, "127.0.0.1", 0, model_name="tiny-llama")   # port 0: any free port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ...  # server.url is http://127.0.0.1:PORT/v1
    server.close()
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import socket
import threading

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from agents.backend import Backend
from agents.models import check_name
from core.machine import PRECISIONS
from server.app import Stats, make_app
from server.options import ServeOptions, add_arguments

API_KEY_ENV = "ARENA_API_KEY"  # the API key when --api-key is not given
BACKLOG = 1024  # the listen backlog (the kernel caps it at net.core.somaxconn)
CLOSE_GRACE = 5.0  # seconds `close` lets requests in progress finish before it cancels them


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with deadlines for a request's head and for a client
    to take the response, and counted connections.

    uvicorn closes a keep-alive connection idle for `timeout_keep_alive` seconds, but any
    byte received stops that clock. Here the clock starts when the connection opens or a
    response ends, and only a whole request head stops it, so a client that sends a byte
    now and then cannot hold a connection. A response that the client stops reading
    (the send buffer stays full) gets as long, then the connection is dropped.
    """

    def __init__(self, *args, stats: Stats, **kwargs):
        super().__init__(*args, **kwargs)
        self.stats = stats
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.stats.count("connections")
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._deadline, self._write_deadline):
            if timer is not None:
                timer.cancel()
        self.stats.count("connections", -1)
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_deadline = self.loop.call_later(self.timeout_keep_alive, self._write_late)

    def resume_writing(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
        super().resume_writing()

    def _write_late(self) -> None:
        if not self.transport.is_closing():
            self.stats.count("timeouts")
            self.transport.abort()  # close() would wait for the buffer to drain

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._await_head()

    def _await_head(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.timeout_keep_alive, self._head_late)

    def _head_late(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete  # no request since
        if waiting and not self.transport.is_closing():
            self.stats.count("timeouts")
            self.transport.close()


class ArenaServer:
    """The app bound to a listening socket, served by uvicorn.

    `serve_forever()` serves until `close()` (from another thread) or Ctrl-C (when it runs
    in the main thread). `stats` counts requests and connections, `batcher` the backend
    calls, for monitoring (and tests).
    """

    def __init__(self, app, sock: socket.socket, options: ServeOptions):
        self.app, self.socket, self.options = app, sock, options
        config = uvicorn.Config(
            app,
            http=functools.partial(_Protocol, stats=app.state.stats),
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            limit_concurrency=options.max_connections + 1,  # uvicorn counts the new one too
            timeout_keep_alive=options.read_timeout,
            backlog=BACKLOG,
        )
        self.uvicorn = uvicorn.Server(config)
        self._running = threading.Event()
        self._stopped = threading.Event()

    model_name = property(lambda self: self.options.model_name)
    api_key = property(lambda self: self.options.api_key)
    stats = property(lambda self: self.app.state.stats)
    batcher = property(lambda self: self.app.state.batcher)
    context = property(lambda self: self.app.state.context)

    @property
    def server_address(self) -> tuple[str, int]:
        return self.socket.getsockname()[:2]

    @property
    def url(self) -> str:
        """Base URL for clients, e.g. http://127.0.0.1:8000/v1."""
        host, port = self.server_address
        return f"http://{host}:{port}/v1"

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Serve until `close()` or Ctrl-C. `poll_interval` is accepted for socketserver-style
        callers and not used: uvicorn looks for `close()` every 0.1 s."""
        self._running.set()
        try:
            self.uvicorn.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def close(self) -> None:
        """Stop serving (requests in progress get CLOSE_GRACE seconds) and stop the batcher."""
        self.uvicorn.should_exit = True
        if self._running.is_set() and not self._stopped.wait(CLOSE_GRACE):
            self.uvicorn.force_exit = True
            self._stopped.wait(CLOSE_GRACE)
        self.socket.close()
        self.batcher.close()


def make_server(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    **limits,
) -> ArenaServer:
    """A listening, not yet serving server (port 0 picks a free port; see `server.url`).

    Run it with `server.serve_forever()` (e.g. in a thread) and stop it with `server.close()`.

    Args:
        backend: what generates.
        host, port: where to listen.
        model_name: the name clients ask for (default: the backend's).
        limits: the other fields of `ServeOptions` (max_batch, batch_wait, api_key,
            max_queue, max_connections, read_timeout).

    Returns:
        The server.
    """
    options = ServeOptions(model_name or getattr(backend, "name", "model"), **limits)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    return ArenaServer(make_app(backend, options), sock, options)


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
        server.close()


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
