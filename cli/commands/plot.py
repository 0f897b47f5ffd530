"""`arena plot RUN_DIR [RUN_DIR ...] [--out PNG] [--target 0.9]`: evaluation curves on one chart."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena plot` to `p`."""
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a training run folder, or a seed sweep's data file (.json rows that kept their runs' evaluation rows)",
    )
    p.add_argument(
        "--out", help="PNG path (default for one run: RUN_DIR/eval.png; required for several)"
    )
    p.add_argument(
        "--labels", help="comma-separated legend names, one per run (default: the run dir names)"
    )
    p.add_argument("--target", type=float, help="draw a dotted line at this rate (e.g. 0.9)")


def run(args: argparse.Namespace) -> None:
    """Draw the runs' evaluation curves and print where the PNG went."""
    from training.plots import plot_eval  # start-up time: this command only

    labels = args.labels.split(",") if args.labels else None
    print(plot_eval(args.runs, args.out, labels, target=args.target))
