"""Random-play steps/s: our games vs PettingZoo classic, and our text layer vs TextArena's.

    python bench/env_throughput.py            # 20k steps per env, 3 alternating repeats
    python bench/env_throughput.py --quick

Action ids (against PettingZoo classic, which renders no text): both sides play uniformly
random legal moves read from the `action_mask`, through the same AEC loop (`agent_iter` /
`last` / `step`), with the same seeds. Target: ours >= 2x PettingZoo classic; our text
layer is rendered only when a prompt is asked for, so random play never pays for it.

Text (against TextArena, the text-native peer; `pip install textarena`, else skipped with a
note): tic-tac-toe where every turn renders the prompt the player would read and answers
with a uniformly random legal move written as text, `[k]`, which the env parses. Ours: the
AEC loop as the arena drives it (`arena.runner`: a text player reads no observation tensor,
so the loop reads `terminations` / `truncations` rather than `last()`), with
`env.view(agent).prompt()` and `env.parse(agent, "[k]")`, one env reset per game; TextArena: `get_observation()` (its prompt) and `step("[k]")`, a fresh `ta.make` per
game, because its env slows down as it is reset (it keeps every game's observations).
Both draw their moves from Python's `random.Random` (numpy's per-call overhead would weigh
on both sides alike and blur the ratio). Target: ours >= 2x TextArena.

In each comparison the two paths alternate, so machine load hits both alike; the ratio of
the medians counts.
"""

from __future__ import annotations

import argparse
import random
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


TEXT_GAME = ("tic_tac_toe", "TicTacToe-v0")  # ours, TextArena's


def text_steps_per_second(steps: int, seed: int) -> tuple[float, float]:
    """Our text loop (module doc): steps per second of wall time and per CPU second."""
    import games

    rng = random.Random(seed)
    env = games.make(TEXT_GAME[0])
    done, game = 0, 0
    start, cpu = time.perf_counter(), time.process_time()
    while done < steps:
        env.reset(seed=seed + game)
        game += 1
        for agent in env.agent_iter():
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                continue
            view = env.view(agent)
            view.prompt()
            reply = f"[{view.legal_moves[rng.randrange(len(view.legal_moves))]}]"
            env.step(env.parse(agent, reply))
            done += 1
    return done / (time.perf_counter() - start), done / (time.process_time() - cpu)


def textarena_steps_per_second(steps: int, seed: int) -> tuple[float, float]:
    """TextArena's text loop (module doc): steps per second of wall time and per CPU second."""
    import textarena as ta  # optional: the bench's peer, not a dependency

    rng = random.Random(seed)
    done, game = 0, 0
    start, cpu = time.perf_counter(), time.process_time()
    while done < steps:
        env = ta.make(TEXT_GAME[1])
        env.reset(num_players=2, seed=seed + game)
        game += 1
        finished = False
        while not finished:
            env.get_observation()
            board = env.state.game_state["board"]
            legal = [r * 3 + c for r in range(3) for c in range(3) if board[r][c] == ""]
            finished, _ = env.step(f"[{legal[rng.randrange(len(legal))]}]")
            done += 1
        env.close()
    return done / (time.perf_counter() - start), done / (time.process_time() - cpu)


def has_textarena() -> bool:
    from importlib.util import find_spec

    return find_spec("textarena") is not None


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
    console = Console()
    console.print(table)
    if not has_textarena():
        console.print(
            "text play vs TextArena: skipped, textarena is not installed (pip install textarena)"
        )
        return ratios
    ratios.update(text_comparison(args.steps, args.repeats, console))
    return ratios


def text_comparison(steps: int, repeats: int, console) -> dict[str, float]:
    """Our text loop against TextArena's, alternating; the ratios of the medians, per wall
    second and per CPU second (the process's own time: less moved by other work on the box)."""
    from rich.table import Table

    ours, theirs = [], []
    for r in range(repeats):  # alternate the two paths
        ours.append(text_steps_per_second(steps, seed=r))
        theirs.append(textarena_steps_per_second(steps, seed=r))
    (wall_a, cpu_a), (wall_b, cpu_b) = np.median(ours, axis=0), np.median(theirs, axis=0)
    table = Table(title=f"text play (prompt, reply, parse), {steps:,} steps, median of {repeats}")
    columns = ("game", "ours steps/s", "TextArena steps/s", "ratio", "per CPU s", "target >= 2x")
    for col in columns:
        table.add_column(col, justify="right" if col != "game" else "left")
    wall, cpu = float(wall_a / wall_b), float(cpu_a / cpu_b)
    table.add_row(
        TEXT_GAME[0],
        f"{wall_a:,.0f}",
        f"{wall_b:,.0f}",
        f"{wall:.2f}x",
        f"{cpu:.2f}x",
        "met" if wall >= 2 else "MISSED",
    )
    console.print(table)
    return {f"{TEXT_GAME[0]} text": wall, f"{TEXT_GAME[0]} text, per CPU s": cpu}


if __name__ == "__main__":
    main()
