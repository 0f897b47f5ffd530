"""`arena web [RUNS_DIR] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-games 8]`: the web app.

    arena web runs                          # http://127.0.0.1:8080: tournaments, matches, runs
    arena web runs --host 0.0.0.0 --api-key "$(openssl rand -hex 16)"

Serves `web.app.create_app(RUNS_DIR)` with uvicorn until interrupted: the tournaments under
RUNS_DIR with live leaderboards, every recorded match in a viewer, the training runs'
curves, and games played in the browser against agents (/play: at most `--max-games` at
once, each dropped after `--idle-minutes` without a request). It binds 127.0.0.1 unless told otherwise; `--api-key` (or the ARENA_WEB_API_KEY
variable, which keeps the key out of the process list) guards every page and endpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena web` to `p`."""
    p.add_argument(
        "runs_dir",
        nargs="?",
        default="runs",
        metavar="RUNS_DIR",
        help="the folder of tournaments and training runs to show (default: runs)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("ARENA_WEB_API_KEY"),
        help="ask every request for this key (default: $ARENA_WEB_API_KEY; none: no key asked)",
    )
    p.add_argument(
        "--max-games",
        type=int,
        default=8,
        help="the most games played in the browser at once (default: 8)",
    )
    p.add_argument(
        "--idle-minutes",
        type=float,
        default=30.0,
        help="drop a game in the browser after this long without a request (default: 30)",
    )


def run(args: argparse.Namespace) -> None:
    """Check the folder and the port, then serve the app until interrupted."""
    import uvicorn  # start-up time: this command only

    from web.app import create_app  # start-up time: this command only

    root = Path(args.runs_dir)
    if not root.is_dir():
        raise ValueError(f"{root} is not a folder (give the runs folder, e.g. runs)")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be between 1 and 65535, got {args.port}")
    if args.max_games < 1:
        raise ValueError(f"--max-games must be at least 1, got {args.max_games}")
    if not args.idle_minutes > 0:
        raise ValueError(f"--idle-minutes must be above 0, got {args.idle_minutes}")
    if args.api_key == "":
        raise ValueError("--api-key must not be empty")
    if args.api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: serving {root} on {args.host} without --api-key: anyone who can reach "
            "this address sees every match and prompt",
            file=sys.stderr,
        )
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"arena web: {root.resolve()} on http://{host}:{args.port}/ (Ctrl-C stops)", flush=True)
    app = create_app(root, args.api_key, args.max_games, args.idle_minutes * 60)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
