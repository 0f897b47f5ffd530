"""Anchor comparisons and seeding: who is strong before the real tournament starts.

`anchor` is a format of its own (everyone plays one reference player, N-1 pairings, one
round) and the seeding phase of ArenaRL's seeded single elimination: each player's seed
is its result against the anchor. `seed_order` turns any of the seeding options into an
order, best first:

    "order"    the players as given (already sorted by the caller)
    "ratings"  by a prior rating dict, higher first; unrated players after, in given order
    "random"   shuffled with the format's seed
    "anchor"   by a seeding phase against `anchor` (points, then mean score; the anchor
               itself ranked by its own mean over those games)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tournaments.rounds import (
    FormatGen,
    Outcome,
    Pairing,
    Player,
    Tally,
    check_count,
    check_players,
    run_round,
    sort_players,
)

SEEDINGS = ("order", "ratings", "random", "anchor")


def anchor(
    players: Sequence[Player],
    anchor: Player | None = None,
    games: int = 1,
    _tally: Tally | None = None,
) -> FormatGen:
    """Everyone vs `anchor` (default: the first player), `games` games each, in one round.

    Ranked by mean points, then mean score; the anchor by its own mean over its games.

    Args:
      anchor: the reference player (default: the first player).
      games: games each player plays against the anchor.
    """
    players = check_players(players)
    ref = players[0] if anchor is None else anchor
    if ref not in players:
        raise ValueError(f"anchor {ref!r} is not one of the players")
    check_count(games, "games")
    tally = _tally or Tally(players)
    others = [p for p in players if p != ref]
    yield from run_round(tally, [Pairing(p, ref, "A", games) for p in others])
    order = sort_players(players, lambda p: (tally.mean_points(p), tally.mean_score(p)))
    return Outcome(order, tally.stats(), tally.rounds)


def seed_order(
    players: Sequence[Player],
    tally: Tally,
    seeding: str = "order",
    ratings: dict | None = None,
    anchor_player: Player | None = None,
    seed_games: int = 1,
    seed: int = 0,
) -> FormatGen:
    """The players best first under `seeding` (a generator: "anchor" plays a round)."""
    players = list(players)
    if seeding not in SEEDINGS:
        raise ValueError(f"unknown seeding {seeding!r} (choose from {', '.join(SEEDINGS)})")
    if seeding == "ratings":
        if not ratings:
            raise ValueError("seeding 'ratings' needs a ratings mapping {player: rating}")
        unknown = [p for p in ratings if p not in players]
        if unknown:
            raise ValueError(f"ratings name unknown players: {', '.join(map(repr, unknown))}")
        rated = sort_players([p for p in players if p in ratings], lambda p: float(ratings[p]))
        return rated + [p for p in players if p not in ratings]
    if seeding == "random":
        order = list(players)
        random.Random(seed).shuffle(order)
        return order
    if seeding == "anchor":
        outcome = yield from anchor(players, anchor_player, seed_games, _tally=tally)
        return outcome.order
    return players
