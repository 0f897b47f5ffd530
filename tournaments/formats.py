"""Tournament formats: round robin, and the registry of every format.

Each format is a generator over players (see `tournaments.rounds` for the protocol):

    round_robin          every pair, `games` games each, one round (N(N-1)/2 pairings)
    swiss                ceil(log2 N) rounds, no rematches, bye = a won pairing (`tournaments.swiss`)
    single_elimination   seeded, ArenaRL (`tournaments.bracket`)
    double_elimination   out after two losses (`tournaments.bracket`)
    anchor               everyone vs one reference player (`tournaments.seeding`)
    adaptive             Swiss, then information-weighted matchings (`tournaments.adaptive`)

A game of N > 2 seats plays tables of N players instead of pairings: round robin, Swiss
and adaptive have table versions (`tournaments.tables.TABLE_FORMATS`); the elimination
formats and anchor pair two players and need a game of two seats.

`make_format(name, players, seats=2, **options)` builds one by name and rejects unknown
options with the list of known ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from itertools import combinations

from tournaments.adaptive import adaptive, default_budget
from tournaments.bracket import double_elimination, single_elimination
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
from tournaments.seeding import anchor
from tournaments.swiss import swiss, swiss_rounds
from tournaments.tables import TABLE_FORMATS


def round_robin(players: Sequence[Player], games: int = 1) -> FormatGen:
    """Every pair plays `games` games, all in one round; seats alternate inside a pairing.

    With an odd `games` the first-listed side of each pair alternates around the table,
    so every player is listed first about half the time. Ranked by points, then mean score.

    Args:
      games: games per pairing.
    """
    players = check_players(players)
    check_count(games, "games")
    tally = Tally(players)
    idx = {p: i for i, p in enumerate(players)}
    pairings = [
        Pairing(a, b, "RR", games) if (idx[a] + idx[b]) % 2 else Pairing(b, a, "RR", games)
        for a, b in combinations(players, 2)
    ]
    yield from run_round(tally, pairings)
    order = sort_players(players, lambda p: (tally.points[p], tally.mean_score(p)))
    return Outcome(order, tally.stats(), tally.rounds)


FORMATS = {
    "round_robin": round_robin,
    "single_elimination": single_elimination,
    "double_elimination": double_elimination,
    "swiss": swiss,
    "anchor": anchor,
    "adaptive": adaptive,
}


def format_function(name: str, seats: int = 2):
    """The format `name` for a game of `seats` seats (a `FORMATS` or a `TABLE_FORMATS` entry).

    Raises:
      ValueError: an unknown name, or a pairwise-only format for more than two seats.
    """
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r} (choose from {', '.join(FORMATS)})")
    if seats == 2:
        return FORMATS[name]
    if name not in TABLE_FORMATS:
        raise ValueError(
            f"format {name} pairs two players and needs a game of two seats, this one has {seats} "
            f"(formats for tables: {', '.join(TABLE_FORMATS)}; a game of two teams plays any format one "
            "player a side with sides: true)"
        )
    return TABLE_FORMATS[name]


def format_options(name: str, seats: int = 2) -> list[str]:
    """The option names a format accepts (besides `players`, and `seats` for tables)."""
    return [
        p
        for p in inspect.signature(format_function(name, seats)).parameters
        if p not in ("players", "seats") and not p.startswith("_")
    ]


def resolved_options(name: str, players: Sequence[Player], options: dict, seats: int = 2) -> dict:
    """Every option of format `name` with the value it takes: from `options`, else its
    default, resolved (Swiss `rounds` and adaptive `swiss_rounds`: `swiss_rounds`; adaptive
    `max_matches`: `default_budget`; `anchor`: the first player), so an
    option written out at its default compares equal to one left out."""
    params = inspect.signature(format_function(name, seats)).parameters
    out = {k: params[k].default for k in format_options(name, seats)}
    out.update(options)
    if name == "swiss" and out["rounds"] is None:
        out["rounds"] = swiss_rounds(len(players))
    if name == "adaptive":
        if out["swiss_rounds"] is None:
            out["swiss_rounds"] = swiss_rounds(len(players))
        if out["max_matches"] is None:
            out["max_matches"] = default_budget(len(players))
    if "anchor" in out and out["anchor"] is None and players:
        out["anchor"] = players[0]
    return out


def make_format(name: str, players: Sequence[Player], seats: int = 2, **options) -> FormatGen:
    """A format generator by name for a game of `seats` seats (tables when more than two);
    unknown options raise a one-line ValueError."""
    known = format_options(name, seats)
    bad = [k for k in options if k not in known]
    if bad:
        raise ValueError(
            f"unknown option {', '.join(map(repr, bad))} for format {name} (known: {', '.join(known)})"
        )
    if seats == 2:
        return FORMATS[name](players, **options)
    return format_function(name, seats)(players, seats, **options)
