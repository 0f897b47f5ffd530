"""The options of `arena serve`, apart from the server so that `arena --help` stays light.

add_arguments(parser)   # cli.main's `serve` subcommand and server.serve's own parser
ServeOptions(...)       # what the app and the server are given (`server.serve.make_app`)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from core.machine import PRECISIONS
from core.typed_config import above, at_least, check_fields, option


@dataclass(frozen=True)
class ServeOptions:
    """How `arena serve` answers: the served name, micro-batching and the exposure limits."""

    model_name: str = "model"
    """the name clients ask for (`model` in a request, `GET /v1/models`)"""
    max_batch: int = option(64, check=at_least(1))
    """most completions per backend call"""
    batch_wait: float = option(0.01, check=at_least(0))
    """seconds the batcher waits for more requests before it calls the backend"""
    api_key: str | None = None
    """when set, every request needs `Authorization: Bearer api_key` (else 401)"""
    max_queue: int = option(64, check=at_least(1))
    """most requests waiting or generating; one more is a 429 at once"""
    max_connections: int = option(128, check=at_least(1))
    """most connections served at once; a request on one more is a 503 at once"""
    read_timeout: float = option(30.0, check=above(0))
    """seconds a client has to send a request's head, and again its body"""

    def __post_init__(self):
        check_fields(self)


def _positive(kind: type):
    """An argparse type: a finite number of `kind` above 0."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
        return value

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the options of `arena serve` to `p`.

    Args:
        p: the (sub)parser of the serve command.
    """
    p.add_argument("model", help="smollm2-135m, tiny-llama[:SEED], a local folder or a hub id")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    p.add_argument("--max-batch", type=int, default=64, help="most requests per backend call")
    p.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long to collect a batch")
    p.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every request (default: $ARENA_API_KEY; none: unauthenticated)",
    )
    p.add_argument(
        "--max-queue",
        type=_positive(int),
        default=64,
        metavar="N",
        help="most requests waiting or generating at once; more are answered 429 at once",
    )
    p.add_argument(
        "--max-connections",
        type=_positive(int),
        default=128,
        metavar="N",
        help="most connections served at once; a request on one more is answered 503 at once; above --max-queue, so a full queue answers 429s",
    )
    p.add_argument(
        "--read-timeout",
        type=_positive(float),
        default=30.0,
        metavar="S",
        help="seconds a client has to send a request's head (and an idle connection stays open), and again its body",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=PRECISIONS,
        help="auto: a training checkpoint's own training precision, else bf16 where native (fastest; logprobs ~5e-3 off an fp32 forward); float32: exact logprobs",
    )
