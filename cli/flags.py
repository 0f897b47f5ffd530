"""Flags that several `arena` commands take, each defined here once.

add_threads(parser)             --threads N: torch CPU threads (play, serve, tournament, eval)
add_threads(parser, config=True)  --threads N over a config's threads (train)
add_ray(parser)                 --ray ADDRESS --ray-workers N --ray-cpus N --ray-gpus N
ray_options(args)               those flags as an `arena.ray_runner.RayOptions`, or None
add_overwrite(parser)           --overwrite: replace an existing output (export, import)
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arena.ray_runner import RayOptions


def add_threads(p: argparse.ArgumentParser, config: bool = False) -> None:
    """Add `--threads N` to `p`.

    Args:
        p: a command's parser.
        config: the command reads its threads from a config: the flag overrides that (no
            default), instead of setting the threads itself (default 0).
    """
    if config:
        help_text = "override the config's threads (0: chosen from the CPUs and the load)"
    else:
        help_text = (
            "torch CPU threads (default 0: chosen from the usable CPUs and the load, printed)"
        )
    p.add_argument(
        "--threads", type=int, default=None if config else 0, metavar="N", help=help_text
    )


def add_ray(p: argparse.ArgumentParser) -> None:
    """Add `--ray ADDRESS` and the size of its match workers to `p` (play, tournament, eval)."""
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="play the matches on a Ray cluster (an address, auto, or local to start one here; docs/guides/ray.md)",
    )
    p.add_argument(
        "--ray-workers",
        type=int,
        default=0,
        metavar="N",
        help="match workers (default: one per cluster CPU)",
    )
    p.add_argument(
        "--ray-cpus", type=float, default=1, metavar="N", help="CPUs per worker (its torch threads)"
    )
    p.add_argument(
        "--ray-gpus", type=float, default=0, metavar="N", help="GPUs per worker (for local models)"
    )


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The Ray flags of `add_ray` as options for `arena.ray_runner.start_pool`; None without `--ray`."""
    if not args.ray:
        return None
    from arena.ray_runner import RayOptions  # start-up time: --ray only

    return RayOptions(args.ray, args.ray_workers, args.ray_cpus, args.ray_gpus)


def add_overwrite(p: argparse.ArgumentParser) -> None:
    """Add `--overwrite` to `p` (a command that writes one output file or folder)."""
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
