"""Formats for games of N seats (3 to 10): rounds of tables of N distinct players.

The same round protocol as the pairwise formats (`tournaments.rounds`), with a `Table` for a
`Pairing` and a `TableResult` for a `PairResult`:

    table_round_robin   every set of N players once (C(P, N) tables), or `tables` of them
                        drawn so that everyone plays equally often and every pair meets about
                        equally often; one round
    table_swiss         rounds of tables of players with close points, avoiding players who
                        met already (the Swiss of poker and MindGames)
    table_adaptive      Swiss tables, then tables of the players whose comparisons tell the
                        most (Plackett-Luce fit), with the stopping rule of `adaptive`

Seats. A table plays `games` games per game of the config, seats rotating (game g seats
the players rotated by g), so with `games` a multiple of N everyone sits in every seat
equally often. Whatever `games` is, `_Seating` orders each table's players so that the
seats each player has had so far even out (a minimum-cost assignment, scipy).

Elimination brackets and anchor comparisons pair two players: they need a game of two
seats (`tournaments.formats.make_format` says so in one line).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Generator, Sequence
from itertools import combinations

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.stats import norm

from tournaments.adaptive import check_options, default_budget, info_weights, rank_intervals
from tournaments.plackett_luce import strength_fit
from tournaments.rounds import (
    Outcome,
    Player,
    Table,
    TableResult,
    check_count,
    check_players,
    sort_players,
)
from tournaments.swiss import swiss_rounds

TableGen = Generator[list[Table], list[TableResult], Outcome]
L2 = 0.1  # prior precision of the adaptive format's fits, as `tournaments.adaptive.L2`


class TableTally:
    """Running per-player totals of the table formats."""

    def __init__(self, players: Sequence[Player]):
        self.players = list(players)
        self.points: dict = defaultdict(float)
        self.score: dict = defaultdict(float)
        self.games: dict = defaultdict(int)
        self.opponents: dict = defaultdict(list)
        self.rounds: list = []  # per round: list of (Table, TableResult)

    def add(self, t: Table, r: TableResult) -> None:
        for p in t.players:
            self.points[p] += r.points(p)
            self.score[p] += r.score(p)
            self.games[p] += r.games
            self.opponents[p] += [q for q in t.players if q != p]

    def mean_score(self, p: Player) -> float:
        return self.score[p] / self.games[p] if self.games[p] else 0.0

    def stats(self, **extra: dict) -> dict:
        """Per-player stats; `extra` maps a stat name to a {player: value} dict."""
        out = {}
        for p in self.players:
            games = self.games[p]
            out[p] = {
                "points": self.points[p],
                "games": games,
                "mean_points": self.points[p] / games if games else 0.0,
                "mean_score": self.mean_score(p),
                **{name: values[p] for name, values in extra.items() if p in values},
            }
        return out


class _Seating:
    """Seats each player had and how often each pair met: the seat order of the next tables."""

    def __init__(self, players: list[Player], seats: int):
        self.seats = seats
        self.index = {p: i for i, p in enumerate(players)}
        self.seat_counts = np.zeros((len(players), seats))
        self.met = np.zeros((len(players), len(players)))
        self.tables = np.zeros(len(players))

    def seat(self, players: Sequence[Player], label: str, games: int) -> Table:
        """The table of `players` in the seat order that evens out each one's seats over its
        `games` rotations; records the seats and the meetings."""
        n = self.seats
        idx = [self.index[p] for p in players]
        cost = np.array(
            [
                [sum(self.seat_counts[i, (pos - g) % n] for g in range(games)) for pos in range(n)]
                for i in idx
            ]
        )
        rows, cols = linear_sum_assignment(cost)
        order = [players[r] for r in rows[np.argsort(cols)]]
        for pos, p in enumerate(order):
            for g in range(games):
                self.seat_counts[self.index[p], (pos - g) % n] += 1
        for i, j in combinations(idx, 2):
            self.met[i, j] += 1
            self.met[j, i] += 1
        self.tables[idx] += 1
        return Table(tuple(order), label, games)


def run_tables(
    tally: TableTally, tables: list[Table]
) -> Generator[list[Table], list[TableResult], list[TableResult]]:
    """Yield one round of tables, check and record its results (use with `yield from`)."""
    if not tables:
        return []
    results = yield tables
    if results is None or len(results) != len(tables):
        got = "none" if results is None else len(results)
        raise ValueError(f"round of {len(tables)} tables got {got} results")
    for t, r in zip(tables, results):
        if r.games != t.games or any(set(f.seats) != set(t.players) for f in r.finishes):
            raise ValueError(
                f"result for table {t.players!r} ({t.label}) has {r.games} games of other players or count; expected {t.games}"
            )
        tally.add(t, r)
    tally.rounds.append(list(zip(tables, results)))
    return list(results)


def _check(players: Sequence[Player], seats: int, games: int) -> list:
    players = check_players(players)
    check_count(games, "games")
    if not isinstance(seats, int) or not 2 < seats <= 10:
        raise ValueError(f"a table seats 3 to 10 players, got {seats!r}")
    if len(players) < seats:
        raise ValueError(
            f"a game of {seats} seats needs at least {seats} players, got {len(players)}"
        )
    return players


def draw_tables(
    seating: _Seating, players: list, count: int, label: str, games: int, seed: int
) -> list[Table]:
    """`count` tables, one after another: each starts with a player who sat at the fewest
    tables so far and takes in, seat by seat, the player with the fewest tables, then the
    fewest meetings with those already seated (the sum of their squares, so a pair that met
    often counts more than two that met once; random among equals, from `seed`)."""
    rng = random.Random(seed)
    tables = []
    for _ in range(count):
        tie = {p: rng.random() for p in players}
        table: list = []
        while len(table) < seating.seats:
            rest = [p for p in players if p not in table]
            table.append(
                min(
                    rest,
                    key=lambda p: (
                        seating.tables[seating.index[p]],
                        sum(seating.met[seating.index[p], seating.index[q]] ** 2 for q in table),
                        tie[p],
                    ),
                )
            )
        tables.append(seating.seat(table, label, games))
    return tables


def table_round_robin(
    players: Sequence[Player], seats: int, games: int = 1, tables: int | None = None, seed: int = 0
) -> TableGen:
    """Every set of `seats` players at one table (C(P, N) tables), or `tables` tables drawn
    by `draw_tables`; all in one round. Ranked by points, then mean score.

    Args:
      seats: players at a table (the game's seats).
      games: games per table (and game of the config), seats rotating.
      tables: how many tables to draw; None: every set of `seats` players once.
      seed: the draw's random choices among equals.
    """
    players = _check(players, seats, games)
    if tables is not None:
        check_count(tables, "tables")
    tally = TableTally(players)
    seating = _Seating(players, seats)
    if tables is None:
        round_ = [seating.seat(list(c), "RR", games) for c in combinations(players, seats)]
    else:
        round_ = draw_tables(seating, players, tables, "RR", games, seed)
    yield from run_tables(tally, round_)
    order = sort_players(players, lambda p: (tally.points[p], tally.mean_score(p)))
    return Outcome(order, tally.stats(), tally.rounds)


def swiss_tables(
    standing: list, seats: int, seating: _Seating, label: str, games: int
) -> list[Table]:
    """Disjoint tables down the standing: each takes the best player left, then, seat by
    seat, whoever of the next 2N players left has met those seated the least (on a tie, the
    better standing)."""
    pool = list(standing)
    tables = []
    while len(pool) >= seats:
        table = [pool.pop(0)]
        while len(table) < seats:
            met = lambda p: sum(seating.met[seating.index[p], seating.index[q]] for q in table)
            best = min(pool[: 2 * seats], key=lambda p: (met(p), pool.index(p)))
            table.append(best)
            pool.remove(best)
        tables.append(seating.seat(table, label, games))
    return tables


def table_swiss(
    players: Sequence[Player], seats: int, rounds: int | None = None, games: int = 1, seed: int = 0
) -> TableGen:
    """Swiss by tables: `rounds` (default ceil(log2 P)) rounds of disjoint tables of players
    with close points (`swiss_tables`). When P is not a multiple of N, the P mod N
    lowest-standing players who sat out least sit out the round, scoring half a point per
    game (the mean of a table). The first round's order is random (`seed`). Ranked by points,
    then Buchholz (the opponents' points), then mean score.

    Args:
      seats: players at a table (the game's seats).
      rounds: rounds to play; default ceil(log2 P).
      games: games per table (and game of the config), seats rotating.
      seed: the first round's random order.
    """
    players = _check(players, seats, games)
    rounds = swiss_rounds(len(players)) if rounds is None else rounds
    check_count(rounds, "rounds")
    tally = TableTally(players)
    order = list(players)
    random.Random(seed).shuffle(order)
    seating = _Seating(players, seats)
    byes = {p: 0 for p in players}

    def points(p: Player) -> float:
        return tally.points[p] + byes[p] * games / 2

    for r in range(1, rounds + 1):
        standing = sort_players(order, points)
        out = sorted(reversed(standing), key=lambda p: byes[p])[: len(players) % seats]
        for p in out:
            byes[p] += 1
        tables = swiss_tables([p for p in standing if p not in out], seats, seating, f"S{r}", games)
        yield from run_tables(tally, tables)
    buchholz = {p: sum(points(o) for o in tally.opponents[p]) for p in players}
    final = sort_players(order, lambda p: (points(p), buchholz[p], tally.mean_score(p)))
    stats = tally.stats(buchholz=buchholz, byes=byes)
    for p in players:
        stats[p]["points"] = points(p)
    return Outcome(final, stats, tally.rounds)


def table_adaptive(
    players: Sequence[Player],
    seats: int,
    max_matches: int | None = None,
    width: int | None = None,
    level: float = 0.95,
    games: int = 1,
    swiss_rounds: int | None = None,
    seed: int = 0,
) -> TableGen:
    """Swiss tables, then each round the tables that tell the most, until the budget is spent
    or the ranks are settled (the options of `tournaments.adaptive.adaptive`).

    Before each adaptive round a Plackett-Luce fit (`tournaments.plackett_luce.strength_fit`)
    gives every pair its information weight (`tournaments.adaptive.info_weights`: one more
    comparison's Fisher information times the variance it acts on, less for pairs that met);
    tables are then filled greedily, the heaviest free pair first, then the player adding the
    most weight. Ranked by the final fit, then points, then mean score.

    Args:
      seats: players at a table (the game's seats).
      max_matches: budget in games (a table of `games` games counts `games`), Swiss rounds
        included; default `tournaments.adaptive.default_budget(P)`.
      width: stop once every rank interval spans at most `width` places; None = whole budget.
      level: confidence of the comparisons behind the rank intervals.
      games: games per table (and game of the config), seats rotating.
      swiss_rounds: rounds of the Swiss phase (default ceil(log2 P), fewer if the budget is smaller).
      seed: the Swiss phase's random first order.
    """
    players = _check(players, seats, games)
    n = len(players)
    budget = default_budget(n) if max_matches is None else max_matches
    rounds = check_options(n, games, budget, width, level, "info", swiss_rounds, seats)
    tally = TableTally(players)
    opening = yield from table_swiss(players, seats, rounds, games, seed)
    seating = _Seating(players, seats)
    for round_ in opening.rounds:
        for t, r in round_:
            tally.add(t, r)
            seating.seat(list(t.players), t.label, t.games)
        tally.rounds.append(round_)
    used = sum(t.games for round_ in tally.rounds for t, _ in round_)
    z, stopped, r = norm.ppf(0.5 + level / 2), "budget", 0
    while True:
        theta, cov = strength_fit(_finishes(tally), players, L2)
        lo, hi = rank_intervals(theta, cov, z)
        if width is not None and np.max(hi - lo) <= width:
            stopped = "settled"
            break
        left = (budget - used) // games
        if left < 1:
            break
        r += 1
        groups = _informative_tables(info_weights(theta, cov, seating.met), seats)[:left]
        tables = [seating.seat([players[i] for i in g], f"A{r}", games) for g in groups]
        used += len(tables) * games
        yield from run_tables(tally, tables)
    by_theta = {p: float(theta[i]) for i, p in enumerate(players)}
    order = sort_players(players, lambda p: (by_theta[p], tally.points[p], tally.mean_score(p)))
    stats = tally.stats(
        theta=by_theta,
        rank_lo={p: int(lo[i]) for i, p in enumerate(players)},
        rank_hi={p: int(hi[i]) for i, p in enumerate(players)},
        stopped={p: stopped for p in players},
    )
    return Outcome(order, stats, tally.rounds)


def _finishes(tally: TableTally) -> list:
    return [f for round_ in tally.rounds for _, r in round_ for f in r.finishes]


def _informative_tables(w: np.ndarray, seats: int) -> list[list[int]]:
    """Disjoint tables, heaviest first: each starts from the heaviest pair of free players
    and takes in the free player that adds the most weight."""
    free = list(range(len(w)))
    w = w.copy()
    np.fill_diagonal(w, -np.inf)
    tables = []
    while len(free) >= seats:
        sub = w[np.ix_(free, free)]
        i, j = np.unravel_index(np.argmax(sub), sub.shape)
        table = [free[i], free[j]]
        while len(table) < seats:
            rest = [k for k in free if k not in table]
            table.append(max(rest, key=lambda k: (sum(w[k, m] for m in table), -k)))
        free = [k for k in free if k not in table]
        tables.append(sorted(table))
    return tables


TABLE_FORMATS = {"round_robin": table_round_robin, "swiss": table_swiss, "adaptive": table_adaptive}
