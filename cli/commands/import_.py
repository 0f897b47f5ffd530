"""`arena import openspiel TRAJECTORIES ... OUT.jsonl`: OpenSpiel trajectories as match records."""

from __future__ import annotations

import argparse

from cli.flags import add_overwrite


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the subcommands of `arena import` (openspiel) and their arguments to `p`."""
    what = p.add_subparsers(dest="what", required=True)
    i = what.add_parser(
        "openspiel", help="OpenSpiel trajectories (JSON or JSONL) as a trajectory JSONL file"
    )
    i.add_argument(
        "inputs",
        nargs="+",
        metavar="TRAJECTORIES",
        help="OpenSpiel trajectory files (JSON or JSONL)",
    )
    i.add_argument("out", metavar="OUT.jsonl", help="the trajectory JSONL file to write")
    add_overwrite(i)


def run(args: argparse.Namespace) -> None:
    """Convert the OpenSpiel trajectories and print how many matches were written."""
    from arena.openspiel_trajectories import import_openspiel  # start-up time: pyspiel

    done = import_openspiel(args.inputs, args.out, overwrite=args.overwrite)
    print(f"{done.path}: {done.matches:,} matches")
