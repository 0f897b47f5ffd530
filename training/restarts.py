"""Restarts: self-play matches that start from positions the policy recently lost from.

A policy that loses from a position it rarely reaches (tic-tac-toe: a random X's first
threat, which the policy as O meets in 1 game of 30) sees that position too seldom, and is
punished there too weakly (a random opponent takes the win 1 time in 5), for policy
gradient to find the move that saves it. `games[i].restarts: share` starts that share of the
game's self-play pairs from the position before a losing move of the policy in the last
steps' matches: the action history up to the loser's last decision, replayed by the runner
(`MatchPlan.start`, recorded as `arena.runner.OPENING` turns). The policy then moves there
against itself, which takes a win it is left (as the costly positions' random opponent
does not), so the saving move is sampled and credited where it matters. With
`games[i].branch` a group of pairs restarts from one position (the `gigpo` estimator then
compares the moves made there with each other).

In a config::

    games:
      - name: tic_tac_toe
        restarts: 0.25          # a quarter of the self-play pairs restart from a lost position
        restart_from: league    # ... one lost against a league opponent (bots, snapshots)

The buffer keeps the last `size` positions per game and params (the oldest drop out),
from every match the policy lost a seat in, or with `games[i].restart_from: league` only
from its matches against league opponents (bots, past checkpoints): in self-play one seat
loses every decisive match, and those positions crowd out the ones where the policy fails
against play unlike its own. The match's seed and params come along, so a game with chance
events replays the same deal.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass

import numpy as np

from core.records import MatchRecord


@dataclass(frozen=True)
class Position:
    """A position to restart from: the game, its params and seed, and the actions that reach it."""

    game: str
    params: dict
    seed: int
    actions: tuple[int, ...]


def lost_positions(records: list[MatchRecord], agent: str) -> list[Position]:
    """For every seat `agent` lost (in matches that ended without error), the position before
    that seat's last decision: the actions of every turn before it."""
    out = []
    for rec in records:
        if rec.error is not None:
            continue
        for player, name in rec.seats.items():
            if name != agent or rec.outcome.get(player) != "loss":
                continue
            last = max(
                (k for k, t in enumerate(rec.turns) if t.player == player and t.agent == agent),
                default=None,
            )
            if last is None or any(t.action is None for t in rec.turns[:last]):
                continue
            out.append(
                Position(
                    rec.game,
                    dict(rec.params),
                    rec.seed,
                    tuple(int(t.action) for t in rec.turns[:last]),
                )
            )
    return out


def _key(game: str, params: dict) -> str:
    return f"{game} {json.dumps(params, sort_keys=True)}"


class RestartBuffer:
    """The last `sizes[game]` lost positions of each game (and params); `default` for games not in `sizes`."""

    def __init__(self, sizes: dict[str, int] | None = None, default: int = 256):
        self.sizes, self.default = dict(sizes or {}), default
        if min([default, *self.sizes.values()]) < 1:
            raise ValueError(f"restart buffer sizes must be >= 1, got {self.sizes or default}")
        self.positions: dict[str, deque[Position]] = {}

    def add(self, positions: list[Position]) -> None:
        for p in positions:
            held = self.positions.setdefault(
                _key(p.game, p.params), deque(maxlen=self.sizes.get(p.game, self.default))
            )
            held.append(p)

    def sample(self, game: str, params: dict, rng: np.random.Generator) -> Position | None:
        """A uniformly drawn position of `game` with `params`, or None while it has none."""
        held = self.positions.get(_key(game, params))
        if not held:
            return None
        return held[int(rng.integers(len(held)))]

    def __len__(self) -> int:
        return sum(len(h) for h in self.positions.values())

    def state_dict(self) -> list:
        """The positions, oldest first per game (sizes come from the config)."""
        return [
            [p.game, p.params, p.seed, list(p.actions)]
            for held in self.positions.values()
            for p in held
        ]

    def load_state_dict(self, state: list) -> None:
        self.positions = {}
        self.add(
            [
                Position(g, dict(params), int(seed), tuple(int(a) for a in actions))
                for g, params, seed, actions in state
            ]
        )
