"""Simulated Bradley-Terry players: a real `play_matches` for tests and benchmarks.

Player i beats j with probability sigmoid(s_i - s_j) (minus a draw share), drawn from
the match seed; at a table of N > 2 seats the finishing order is drawn from Plackett-Luce
with strengths exp(s_i) (`pl_order`, the Gumbel-max way), the return N - place, so a match has the same result whenever and however often it is played.
`bt_play_matches` behaves like the arena adapter: it "plays" a batch `concurrency`
matches at a time (sleeping `delay` seconds per batch), appends each MatchRecord to the
JSONL and only then yields the results.

    python -m tournaments.sim --db /tmp/t.db --players 16 --format swiss --delay 0.005
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterator

import numpy as np

from core.records import MatchRecord, TurnRecord, append_jsonl, outcomes
from tournaments.config import load_config
from tournaments.run import run_tournament
from tournaments.store import MatchResult, MatchSpec, jsonl_beside


def bt_outcome(strengths: dict, a, b, seed: int, draw: float = 0.0) -> float:
    """Points of `a` against `b` (1, 0.5, 0) drawn from the BT model with the match seed."""
    u = np.random.default_rng(seed).random()
    p = 1.0 / (1.0 + math.exp(strengths[b] - strengths[a]))
    if u < p * (1 - draw):
        return 1.0
    if u < p * (1 - draw) + draw:
        return 0.5
    return 0.0


def pl_order(strengths: dict, seats: list, seed: int) -> list[int]:
    """Seat indices best first, a Plackett-Luce draw: sort s_i + Gumbel noise (the match seed)."""
    noise = np.random.default_rng(seed).gumbel(size=len(seats))
    return sorted(range(len(seats)), key=lambda i: -(strengths[seats[i]] + noise[i]))


def bt_record(spec: MatchSpec, strengths: dict, draw: float = 0.0) -> MatchRecord:
    """A MatchRecord for `spec` with a BT-drawn result (Plackett-Luce for more than two seats)
    and short illustrative turns, one per seat."""
    agents = [f"player_{i}" for i in range(len(spec.seats))]
    if len(spec.seats) == 2:
        pts = bt_outcome(strengths, *spec.seats, spec.seed, draw)
        returns = {"player_0": 2 * pts - 1, "player_1": 1 - 2 * pts}
    else:
        order = pl_order(strengths, spec.seats, spec.seed)
        returns = {agents[s]: float(len(order) - 1 - k) for k, s in enumerate(order)}
    turns = []
    for i, (agent, name) in enumerate(zip(agents, spec.seats)):
        move = str((spec.seed >> (4 * i)) % 3)
        turns.append(
            TurnRecord(
                index=i,
                player=agent,
                agent=name,
                move=move,
                action=int(move),
                messages=[
                    {"role": "system", "content": "You play a simulated game."},
                    {
                        "role": "user",
                        "content": f"{spec.game}: you are {name} as {agent}. Choose a move from [0, 1, 2].",
                    },
                ],
                completion=f"I choose <answer>{move}</answer>",
                legal_moves=["0", "1", "2"],
                reward=returns[agent],
            )
        )
    now = time.time()
    return MatchRecord(
        spec.match_id,
        spec.game,
        dict(spec.params),
        spec.seed,
        dict(zip(agents, spec.seats)),
        turns,
        returns,
        outcomes(returns),
        now,
        now,
    )


def bt_play_matches(
    strengths: dict, jsonl: str, delay: float = 0.0, draw: float = 0.0, concurrency: int = 4
):
    """A play_matches function for simulated players (see the module doc)."""

    def play(specs: list[MatchSpec]) -> Iterator[MatchResult]:
        for start in range(0, len(specs), concurrency):
            if delay:
                time.sleep(delay)
            records = [bt_record(s, strengths, draw) for s in specs[start : start + concurrency]]
            for rec in records:
                append_jsonl(jsonl, rec)
            for rec in records:
                yield MatchResult.from_record(rec, jsonl)

    return play


def sim_config(
    n: int,
    fmt: str,
    k: int = 1,
    seed: int = 0,
    games: tuple[str, ...] = ("tic_tac_toe",),
    **format_options,
):
    """A TournamentConfig of `n` simulated players p00.. with strengths in `strengths_of`."""
    return load_config(
        {
            "name": f"sim-{fmt}-{n}",
            "format": fmt,
            "players": {f"p{i:02d}": {"type": "sim"} for i in range(n)},
            "games": list(games),
            "games_per_pairing": k,
            "seed": seed,
            "format_options": format_options,
        },
        check_games=False,
    )


def strengths_of(names: list[str], spread: float = 3.0, seed: int = 0) -> dict:
    """Evenly spaced strengths over [-spread, spread], assigned in a seeded random order."""
    rng = np.random.default_rng(seed)
    values = np.linspace(-spread, spread, len(names))
    rng.shuffle(values)
    return {name: float(v) for name, v in zip(names, values)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Run a tournament of simulated Bradley-Terry players.")
    ap.add_argument("--db", required=True)
    ap.add_argument("--players", type=int, default=16)
    ap.add_argument("--format", default="swiss")
    ap.add_argument("--k", type=int, default=1, help="games_per_pairing")
    ap.add_argument("--games", default="tic_tac_toe", help="comma-separated game names")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds per batch of matches")
    ap.add_argument("--draw", type=float, default=0.0)
    ap.add_argument("--concurrency", type=int, default=4, help="matches per batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--option", action="append", default=[], help="format option key=json value")
    args = ap.parse_args(argv)
    opts = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.option)}
    config = sim_config(
        args.players, args.format, args.k, args.seed, tuple(args.games.split(",")), **opts
    )
    strengths = strengths_of(list(config.players), seed=args.seed)
    result = run_tournament(
        config,
        bt_play_matches(
            strengths, str(jsonl_beside(args.db)), args.delay, args.draw, args.concurrency
        ),
        args.db,
    )
    print(
        json.dumps(
            {
                "order": result.outcome.order,
                "matches": len(result.results),
                "recovered": result.recovered,
                "played": result.played,
            }
        )
    )


if __name__ == "__main__":
    main()
