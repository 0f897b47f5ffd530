"""Tournament formats: round robin, Swiss, and the registry of every format.

Each format is a generator over players (see `tournaments.core` for the protocol):

    round_robin          every pair, `games` games each, one round (N(N-1)/2 pairings)
    swiss                ceil(log2 N) rounds, no rematches, bye = a won pairing, Buchholz
    single_elimination   seeded, ArenaRL (`tournaments.bracket`)
    double_elimination   out after two losses (`tournaments.bracket`)
    anchor               everyone vs one reference player (`tournaments.seeding`)
    adaptive             Swiss, then information-weighted matchings (`tournaments.adaptive`)

`make_format(name, players, **options)` builds one by name and rejects unknown options
with the list of known ones.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Sequence
from itertools import combinations

import networkx as nx

from tournaments.adaptive import adaptive, default_budget
from tournaments.bracket import double_elimination, single_elimination
from tournaments.core import (
    FormatGen,
    Outcome,
    Pairing,
    Player,
    Tally,
    check_players,
    play,
    sort_players,
)
from tournaments.seeding import _check_games, anchor, seed_order


def round_robin(players: Sequence[Player], games: int = 1) -> FormatGen:
    """Every pair plays `games` games, all in one round; seats alternate inside a pairing.

    With an odd `games` the first-listed side of each pair alternates around the table,
    so every player is listed first about half the time. Ranked by points, then mean score.
    """
    players = check_players(players)
    _check_games(games, "games")
    tally = Tally(players)
    idx = {p: i for i, p in enumerate(players)}
    pairings = [
        Pairing(a, b, "RR", games) if (idx[a] + idx[b]) % 2 else Pairing(b, a, "RR", games)
        for a, b in combinations(players, 2)
    ]
    yield from play(tally, pairings)
    order = sort_players(players, lambda p: (tally.points[p], tally.mean_score(p)))
    return Outcome(order, tally.stats(), tally.rounds)


def swiss(
    players: Sequence[Player],
    rounds: int | None = None,
    games: int = 1,
    seeding: str = "random",
    ratings: dict | None = None,
    anchor: Player | None = None,
    seed_games: int = 1,
    seed: int = 0,
) -> FormatGen:
    """Swiss system: `rounds` (default ceil(log2 N)) rounds of `games`-game pairings.

    Each round pairs players with equal or close points, never twice the same pair when it
    can be avoided: a maximum-weight perfect matching over the pairs not yet played
    (networkx), weighted against point differences, then the top half of each score
    group against its bottom half (Dutch system). With an odd count the lowest-standing
    player without a bye sits out and scores a won pairing (`games` points, no games). Ranked by points, then Buchholz (sum of the opponents'
    points), then mean score, then the initial order (`seeding`, see `tournaments.seeding`).
    """
    players = check_players(players)
    _check_games(games, "games")
    n = len(players)
    rounds = swiss_rounds(n) if rounds is None else rounds
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    tally = Tally(players)
    seeding_tally = Tally(
        players
    )  # a seeding phase orders the first round; its games earn no Swiss points
    order = yield from seed_order(
        players, seeding_tally, seeding, ratings, anchor, seed_games, seed
    )
    tally.rounds.extend(seeding_tally.rounds)
    initial = {p: i for i, p in enumerate(order)}
    bye_points: dict = {p: 0.0 for p in players}
    first_seat: dict = {p: 0 for p in players}
    met: set = set()

    def points(p):
        return tally.points[p] + bye_points[p]

    for r in range(1, rounds + 1):
        standing = sort_players(order, lambda p: points(p))
        rank = {p: i for i, p in enumerate(standing)}
        bye = None
        if n % 2:
            candidates = [p for p in reversed(standing) if not bye_points[p]] or list(
                reversed(standing)
            )
            bye = next((p for p in candidates if _perfect(standing, p, met)), candidates[0])
        pool = [p for p in standing if p != bye]
        pairs = _pair(pool, rank, points, met)
        pairings = []
        for a, b in pairs:
            if (first_seat[b], rank[b]) < (first_seat[a], rank[a]):
                a, b = b, a
            first_seat[a] += 1
            met.add(frozenset((a, b)))
            pairings.append(Pairing(a, b, f"S{r}", games))
        if bye is not None:
            bye_points[bye] += games
        yield from play(tally, pairings)

    buchholz = {p: sum(points(o) for o in tally.opponents[p]) for p in players}
    final = sort_players(order, lambda p: (points(p), buchholz[p], tally.mean_score(p)))
    stats = tally.stats(
        buchholz=buchholz,
        byes={p: int(v / games) for p, v in bye_points.items()},
        seed={p: i + 1 for p, i in initial.items()},
    )
    for p in players:
        stats[p]["points"] = points(p)
    return Outcome(final, stats, tally.rounds)


def swiss_rounds(n: int) -> int:
    """Swiss's default number of rounds for `n` players: ceil(log2 n)."""
    return max(1, math.ceil(math.log2(n)))


def _pair(pool: list, rank: dict, points, met: set) -> list[tuple]:
    """Pair `pool` (in standing order): perfect matching, fewest rematches, closest scores.

    Within a score group of g players the top half meets the bottom half (1 v g/2+1,
    2 v g/2+2, ..., the Dutch system), so the leaders do not knock each other out early.
    """
    n = len(pool)
    scale = n + 1  # one point of difference outweighs any standing distance
    group = Counter(points(p) for p in pool)

    def cost(i: int, j: int) -> float:
        pi, pj = points(pool[i]), points(pool[j])
        distance = abs((j - i) - group[pi] // 2) if pi == pj else j - i
        return (pi - pj) ** 2 * scale + distance

    costs = {(i, j): cost(i, j) for i, j in combinations(range(n), 2)}
    penalty = (max(costs.values(), default=0) + 1) * n  # one rematch outweighs every cost together
    base = penalty * (n + 1)  # keeps every weight positive
    graph = nx.Graph()
    for (i, j), cost in costs.items():
        rematch = frozenset((pool[i], pool[j])) in met
        graph.add_edge(i, j, weight=base - cost - (penalty if rematch else 0))
    matching = nx.max_weight_matching(graph, maxcardinality=True)
    pairs = sorted((min(i, j), max(i, j)) for i, j in matching)
    return [(pool[i], pool[j]) for i, j in pairs]


def _perfect(standing: list, bye: Player, met: set) -> bool:
    """Can everyone but `bye` be paired without a rematch?"""
    pool = [p for p in standing if p != bye]
    graph = nx.Graph()
    graph.add_nodes_from(range(len(pool)))
    graph.add_edges_from(
        (i, j)
        for i, j in combinations(range(len(pool)), 2)
        if frozenset((pool[i], pool[j])) not in met
    )
    return 2 * len(nx.max_weight_matching(graph, maxcardinality=True)) == len(pool)


FORMATS = {
    "round_robin": round_robin,
    "single_elimination": single_elimination,
    "double_elimination": double_elimination,
    "swiss": swiss,
    "anchor": anchor,
    "adaptive": adaptive,
}


def format_options(name: str) -> list[str]:
    """The option names a format accepts (besides `players`)."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r} (choose from {', '.join(FORMATS)})")
    return [
        p
        for p in inspect.signature(FORMATS[name]).parameters
        if p != "players" and not p.startswith("_")
    ]


def resolved_options(name: str, players: Sequence[Player], options: dict) -> dict:
    """Every option of format `name` with the value it takes: from `options`, else its
    default, resolved (Swiss `rounds` and adaptive `swiss_rounds`: `swiss_rounds`; adaptive
    `max_matches`: `default_budget`; `anchor`: the first player), so an
    option written out at its default compares equal to one left out."""
    params = inspect.signature(FORMATS[name]).parameters
    out = {k: params[k].default for k in format_options(name)}
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


def make_format(name: str, players: Sequence[Player], **options) -> FormatGen:
    """A format generator by name; unknown options raise a one-line ValueError."""
    known = format_options(name)
    bad = [k for k in options if k not in known]
    if bad:
        raise ValueError(
            f"unknown option {', '.join(map(repr, bad))} for format {name} (known: {', '.join(known)})"
        )
    return FORMATS[name](players, **options)
