"""The `arena` command line.

arena games [--split train|held_out|extra]   list the catalogue
arena games show NAME                        rules and a sample prompt for each seat
arena play GAME --agents A B [--matches N] [--out run.jsonl]
arena serve MODEL [--port 8000]              an OpenAI-compatible endpoint
arena tournament CONFIG                      create or resume a tournament
arena eval [CONFIG] --agent SPEC [--baseline SPEC] [--suite train|held_out|all | --games G ...]
           [--opponents SPEC ...] [--param [GAME.]KEY=VALUE ...] [--matches N] [--exploitability] [--perfect-play] [--out DIR]   evaluate an agent
arena train CONFIG [--resume] [--steps N] [--out DIR] [--ray ADDRESS] [--set KEY=VALUE ...] [--plan]   self-play RL
arena plot RUN_DIR [RUN_DIR ...] [--out PNG] [--target 0.9]  evaluation curves of runs (seeds) on one chart
arena export model CHECKPOINT_OR_RUN OUT_DIR [--dtype D]      a Hugging Face model folder
arena export trajectories FILE.jsonl ... OUT [--format parquet|hf] [--per turn|match]   a dataset
arena export openspiel FILE.jsonl ... OUT.jsonl               OpenSpiel trajectories
arena import openspiel TRAJECTORIES ... OUT.jsonl             OpenSpiel trajectories as match records
arena web [RUNS_DIR] [--host 127.0.0.1] [--port 8080] [--api-key KEY]  live leaderboards, match viewer, curves
arena env-serve GAME [--param K=V] [--seat S] [--opponents SPEC ...]   a game as an OpenEnv environment server
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from dataclasses import dataclass
from types import ModuleType

from cli.commands import env_serve, export, games, import_, play, plot, serve, tournament, train
from cli.commands import eval as eval_command
from cli.commands import web as web_command
from core.machine import announce_threads, set_threads


@dataclass(frozen=True)
class Command:
    """An `arena` subcommand: its module (`add_arguments(parser)`, `run(args)`) and help line."""

    module: ModuleType
    help: str
    threads: bool = False
    """Set the torch threads from `--threads` before it runs (train sets its config's)."""


COMMANDS: dict[str, Command] = {
    "games": Command(games, "list the game catalogue, or show one game"),
    "play": Command(play, "play matches between agents", threads=True),
    "serve": Command(serve, "serve a model as an OpenAI-compatible endpoint", threads=True),
    "tournament": Command(
        tournament, "create or resume a tournament from a YAML config", threads=True
    ),
    "eval": Command(
        eval_command,
        "evaluate an agent on a suite of games with CIs (and against a baseline, paired)",
        threads=True,
    ),
    "train": Command(train, "self-play RL from a YAML config"),
    "plot": Command(plot, "evaluation curves of one or more training runs on one chart"),
    "export": Command(
        export, "a checkpoint as a Hugging Face model; trajectories as a dataset or OpenSpiel's"
    ),
    "import": Command(import_, "OpenSpiel trajectories as match records"),
    "web": Command(
        web_command, "a web app: live tournament leaderboards, match viewer, training curves"
    ),
    "env-serve": Command(
        env_serve,
        "a game as an OpenEnv environment server (one seat yours, agents the others)",
        threads=True,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The `arena` parser: a subcommand per entry of `COMMANDS`, its arguments its module's."""
    p = argparse.ArgumentParser(
        prog="arena", description="LLM agents play games, get ranked, and improve by self-play."
    )
    sub = p.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.module.add_arguments(sub.add_parser(name, help=command.help))
    return p


_MATCHES_KEPT = (
    " (the matches finished before are kept: fix this, then run the same command to go on)"
)
AFTER_A_FAILED_WRITE = {  # what a failed write (a full disk) leaves, and the way on
    "train": " (the checkpoints written before are intact: fix this, then add --resume)",
    "tournament": _MATCHES_KEPT,
    "eval": _MATCHES_KEPT,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        announce_threads(printer=lambda line: None)  # an earlier call's line is not this command's
        command = COMMANDS[args.command]
        if command.threads:  # train sets its config's threads
            set_threads(args.threads, verbose=False)  # printed when a model loads
        command.module.run(args)
    except (ValueError, RuntimeError, OSError, KeyError, sqlite3.Error) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, sqlite3.Error):
            msg = f"results store (SQLite): {msg}"
        if (
            isinstance(e, (OSError, sqlite3.Error)) and not isinstance(e, FileNotFoundError)
        ) or getattr(e, "matches_kept", False):  # e.g. a full disk, a failing backend
            msg += AFTER_A_FAILED_WRITE.get(args.command, "")
        print(f"arena {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a command may say what it kept and how to go on
        print(f"arena {args.command}: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
