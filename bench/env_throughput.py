"""Random-play steps/s: our OpenSpiel-backed games vs PettingZoo classic, in one run.

    python bench/env_throughput.py            # 20k steps per env, 3 alternating repeats
    python bench/env_throughput.py --quick

Both sides play uniformly random legal moves read from the `action_mask`, through the
same AEC loop (`agent_iter` / `last` / `step`), with the same seeds; the paths alternate
so machine load hits both alike. Target: ours >= 2x PettingZoo classic; our text
layer is rendered only when a prompt is asked for, so random play never pays for it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

PAIRS = {  # our game -> the PettingZoo classic env playing the same game
    "tic_tac_toe": "tictactoe_v3",
    "connect_four": "connect_four_v3",
}


def make_ours(name: str):
    import games

    return lambda: games.make(name)


def make_pettingzoo(name: str):
    from importlib import import_module

    module = import_module(f"pettingzoo.classic.{name}")
    return module.env


def steps_per_second(make_env, steps: int, seed: int) -> float:
    """Play random games until `steps` steps are taken; steps per second of wall time."""
    rng = np.random.default_rng(seed)
    env = make_env()
    done, game = 0, 0
    start = time.perf_counter()
    while done < steps:
        env.reset(seed=seed + game)
        game += 1
        for _agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
            else:
                env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            done += 1
    return done / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=20_000, help="steps per measurement")
    p.add_argument("--repeats", type=int, default=3, help="alternating repeats; the median counts")
    p.add_argument("--quick", action="store_true", help="1,000 steps, one repeat (smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 1000, 1

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"random play, {args.steps:,} steps, median of {args.repeats}")
    for col in ("game", "ours steps/s", "PettingZoo steps/s", "ratio", "target >= 2x"):
        table.add_column(col, justify="right" if col != "game" else "left")
    ratios = {}
    for ours, theirs in PAIRS.items():
        a, b = [], []
        for r in range(args.repeats):  # alternate the two paths
            a.append(steps_per_second(make_ours(ours), args.steps, seed=r))
            b.append(steps_per_second(make_pettingzoo(theirs), args.steps, seed=r))
        ratio = float(np.median(a) / np.median(b))
        ratios[ours] = ratio
        table.add_row(
            ours,
            f"{np.median(a):,.0f}",
            f"{np.median(b):,.0f}",
            f"{ratio:.2f}x",
            "met" if ratio >= 2 else "MISSED",
        )
    Console().print(table)
    return ratios


if __name__ == "__main__":
    main()
