"""Swiss system: ceil(log2 N) rounds, no rematches, a bye counts as a won pairing, ties
broken by Buchholz. Registered in `tournaments.formats`; the Swiss phase of `adaptive`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import combinations

import networkx as nx

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
from tournaments.seeding import seed_order


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

    Args:
      rounds: Swiss rounds; default ceil(log2 N).
      games: games per pairing.
      seeding: the first round's order: "random", "order" (as listed), "ratings" or "anchor".
      ratings: {player: rating} for seeding "ratings" (higher first; unrated players after).
      anchor: the reference player of seeding "anchor" (default: the first player).
      seed_games: games each player plays against the anchor when seeding "anchor".
      seed: the random order of seeding "random".
    """
    players = check_players(players)
    check_count(games, "games")
    n = len(players)
    rounds = swiss_rounds(n) if rounds is None else rounds
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    tally = Tally(players)
    # a seeding phase orders the first round; its games earn no Swiss points
    seeding_tally = Tally(players)
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
        bye = _bye(standing, bye_points, met) if n % 2 else None
        pool = [p for p in standing if p != bye]
        pairs = _pair(pool, rank, points, met)
        pairings = [_seat(a, b, rank, first_seat, met, f"S{r}", games) for a, b in pairs]
        if bye is not None:
            bye_points[bye] += games
        yield from run_round(tally, pairings)

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


def _bye(standing: list, bye_points: dict, met: set) -> Player:
    """Who sits out: the lowest-standing player without a bye (anyone, once all had one)
    whose absence leaves a perfect matching without rematches, else the first of them."""
    candidates = [p for p in reversed(standing) if not bye_points[p]] or list(reversed(standing))
    return next((p for p in candidates if _perfect(standing, p, met)), candidates[0])


def _seat(
    a: Player, b: Player, rank: dict, first_seat: dict, met: set, label: str, games: int
) -> Pairing:
    """The pairing of a and b, listing first the one who sat first less often (on a tie, the
    higher standing); records the seat and the meeting."""
    if (first_seat[b], rank[b]) < (first_seat[a], rank[a]):
        a, b = b, a
    first_seat[a] += 1
    met.add(frozenset((a, b)))
    return Pairing(a, b, label, games)


def swiss_rounds(n: int) -> int:
    """Swiss's default number of rounds for `n` players: ceil(log2 n)."""
    return max(1, math.ceil(math.log2(n)))


def _pair(pool: list, rank: dict, points, met: set) -> list[tuple]:
    """Pair `pool` (in standing order): perfect matching, fewest rematches, closest scores.

    Within a score group of g players the top half meets the bottom half (1 v g/2+1,
    2 v g/2+2, ..., the Dutch system), so the top players do not knock each other out early.
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
