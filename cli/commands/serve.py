"""`arena serve MODEL [--port 8000]`: a model as an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse

from cli.flags import add_threads
from server.options import add_arguments as serve_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena serve` (`server.options`) and `--threads` to `p`."""
    serve_arguments(p)
    add_threads(p)


def run(args: argparse.Namespace) -> None:
    """Serve the model until interrupted (`server.serve.main`)."""
    from server.serve import main as serve_main  # start-up time: this command only

    serve_main(args)
