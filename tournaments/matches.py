"""The matches of a tournament played through the arena: `arena_play_matches(agents, jsonl,
concurrency, max_turns)` is the play_matches that `tournaments.run.run_tournament` calls
with each round's matches (used by `arena tournament`, the league of `training` and the
benchmarks). `arena_seats` seats a match played one player a side (`sides: true`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import games
from agents.base import WrongGame
from arena.runner import MatchPlan, play
from tournaments.config import game_seats
from tournaments.store import MatchResult, MatchSpec


def arena_play_matches(
    agents: dict, jsonl: Path, concurrency: int, max_turns: int, progress=None, pool=None
):
    """A `tournaments.run` play_matches that plays `agents` (name -> Agent) through `arena.runner.play`,
    or on the Ray workers of `pool` (`arena.ray_runner.RayPool`, which hold their own agents)."""

    def play_matches(specs) -> Iterator[MatchResult]:
        plans = [
            MatchPlan(s.match_id, s.game, arena_seats(s), s.seed, dict(s.params), s.opening)
            for s in specs
        ]
        sides = {p.match_id for p, s in zip(plans, specs) if len(p.seats) != len(s.seats)}
        if pool is not None:
            records = pool.play(plans, concurrency, max_turns, out=str(jsonl), progress=progress)
        else:
            records = play(
                plans,
                agents,
                concurrency=concurrency,
                out=str(jsonl),
                max_turns=max_turns,
                progress=progress,
            )
        try:
            for rec in records:
                yield MatchResult.from_record(rec, jsonl, rec.match_id in sides)
        except WrongGame as e:  # a bot asked to play a game it does not know
            raise ValueError(
                f"{e} (a player can use a different agent per game: {{by_game: {{GAME: SPEC, default: SPEC}}}})"
            ) from e

    return play_matches


def arena_seats(spec: MatchSpec) -> list[str]:
    """The arena's seat names of a match: its players, or, where it names one player a side
    of a game of two teams (`sides: true`), each player in every seat of its side's team
    (dealt with the match's seed): `a`, `a#2`, ... (the arena plays `a#2` with agent `a`)."""
    n = game_seats(spec.game, json.dumps(spec.params, sort_keys=True))
    if len(spec.seats) == n:
        return list(spec.seats)
    out = [""] * n
    for player, team in zip(spec.seats, games.declared_teams(spec.game, spec.params, spec.seed)):
        for j, seat in enumerate(team):
            out[seat] = player if j == 0 else f"{player}#{j + 1}"
    return out
