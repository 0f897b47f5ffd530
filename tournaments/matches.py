"""The matches of a tournament played through the arena: `arena_play_matches(agents, jsonl,
concurrency, max_turns)` is the play_matches that `tournaments.run.run_tournament` calls
with each round's matches (used by `arena tournament`, the league of `training` and the
benchmarks)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from agents.base import WrongGame
from arena.runner import MatchPlan, play
from tournaments.store import MatchResult


def arena_play_matches(
    agents: dict, jsonl: Path, concurrency: int, max_turns: int, progress=None, pool=None
):
    """A `tournaments.run` play_matches that plays `agents` (name -> Agent) through `arena.runner.play`,
    or on the Ray workers of `pool` (`arena.ray_runner.RayPool`, which hold their own agents)."""

    def play_matches(specs) -> Iterator[MatchResult]:
        plans = [
            MatchPlan(s.match_id, s.game, list(s.seats), s.seed, dict(s.params), s.opening)
            for s in specs
        ]
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
                yield MatchResult.from_record(rec, jsonl)
        except WrongGame as e:  # a bot asked to play a game it does not know
            raise ValueError(
                f"{e} (a player can use a different agent per game: {{by_game: {{GAME: SPEC, default: SPEC}}}})"
            ) from e

    return play_matches
