"""`arena env-serve GAME [--param K=V] [--seat S ...] [--opponents SPEC ...] [--max-sessions N]`:
a game as an OpenEnv environment server (`server.openenv_env`).

    arena env-serve tic_tac_toe --opponents random --port 8000
    arena env-serve openspiel:kuhn_poker --param players=3 --seat 1 --opponents cfr random
    arena env-serve codewords --seat 0 --seat 1 --opponents codewords_tags     # a whole team
    arena env-serve tic_tac_toe --tournament runs/quickstart/tournament.db \
        --player my-grpo-step-40 --opponents mcts-100                          # into a tournament

Each WebSocket session of OpenEnv's client (`openenv.core.GenericEnvClient`) is a match in
which the client plays `--seat` (repeat it to hold several seats: a step acts for the one to
move) and the agent specs of `--opponents` play the other seats (one spec for all, or one per
other seat in seat order). `reset(seed=S)` replays match S; a step sends the reply text
(`{"reply": "[4]"}`), parsed by the game; `--record PATH` appends every finished episode to a
JSONL of match records. With `--tournament DB` the game is the tournament's (its params), the
opponents are its players by name, and every finished episode is appended to its people file
under `--player`, so `arena tournament CONFIG --report-only` ranks that player with the
others. Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import sys

from cli.flags import add_threads
from core.overrides import game_params


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena env-serve` to `p`."""
    p.add_argument("game", help="a catalogue game (arena games) or openspiel:<game>")
    p.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="game parameter (repeatable)"
    )
    p.add_argument(
        "--seat",
        action="append",
        help="the seat the client plays: 0, 1, ... or player_1 (default 0); repeat for several",
    )
    p.add_argument(
        "--opponents",
        nargs="+",
        default=["random"],
        metavar="SPEC",
        help="agent specs for the other seats: one for all, or one per seat in order (default random)",
    )
    p.add_argument(
        "--on-bad-reply",
        choices=["retry", "forfeit"],
        default="retry",
        help="a reply the parser rejects: retry (nothing played; parse_error) or forfeit (default retry)",
    )
    p.add_argument("--record", metavar="PATH", help="append every finished episode to this JSONL")
    p.add_argument(
        "--tournament",
        metavar="DB",
        help="play into this tournament store: its game params, its players as --opponents",
    )
    p.add_argument(
        "--player",
        default="client",
        help="the client's name in the records and, with --tournament, on its leaderboard",
    )
    p.add_argument("--max-sessions", type=int, default=16, help="sessions at once (default 16)")
    p.add_argument(
        "--max-turns", type=int, default=2000, help="decisions before a match is truncated"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    add_threads(p)


def run(args: argparse.Namespace) -> None:
    """Check the options (a bad game, seat or spec fails here, in one line), then serve."""
    import uvicorn  # start-up time: this command only

    from server.openenv_env import create_app  # start-up time: this command only

    if args.max_sessions < 1:
        raise ValueError(f"--max-sessions must be at least 1, got {args.max_sessions}")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be between 1 and 65535, got {args.port}")
    seats = [int(s) if s.isdigit() else s for s in args.seat or ["0"]]
    opponents = args.opponents[0] if len(args.opponents) == 1 else list(args.opponents)
    # with --tournament, a record or a param is refused by server.openenv_env.into_tournament
    options = {**({"record": args.record} if args.record else {}), **game_params(args.param)}
    app = create_app(
        args.game,
        max_sessions=args.max_sessions,
        tournament=args.tournament,
        seat=seats[0] if len(seats) == 1 else seats,
        opponents=opponents,
        on_bad_reply=args.on_bad_reply,
        max_turns=args.max_turns,
        player_name=args.player,
        **options,
    )
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"arena env-serve: {args.game}, the client ({args.player}) in seat "
        f"{', '.join(map(str, seats))} against {' '.join(args.opponents)}"
        f"{f' into {args.tournament}' if args.tournament else ''}, on http://{host}:{args.port} "
        "(Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
