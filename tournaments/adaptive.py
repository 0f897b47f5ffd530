"""Adaptive tournaments: Swiss rounds, then each round the pairs that tell the most.

    gen = adaptive(players, max_matches=768)          # a FormatGen (see tournaments.rounds)
    ranks = rank_group(64, compare, format="adaptive", max_matches=768)

1. Swiss rounds (`tournaments.formats.swiss`, ceil(log2 N) by default, no rematches).
2. Then, before every round, refit Bradley-Terry (`tournaments.ratings.penalised_fit`) with its
   covariance (the model-based H^-1 of `sandwich_covariance`), weight every candidate pair (i, j)
   by how much one more game between them would tell (`WEIGHTS`, default "kendall":
   the drop in the expected number of misordered pairs of the whole ranking), and play
   the maximum-weight matching (networkx): N/2 pairings that run at once. Seats
   alternate: the player who sat first less often sits first.
3. Stop when the budget `max_matches` (games, the Swiss rounds included) is spent, or,
   with `width`, as soon as every player's rank interval spans at most `width` places
   (`rank_intervals`: i is surely above j when theta_i - theta_j is above zero at `level`).

Ranked by the final Bradley-Terry fit, ties broken by points, then mean score, then the
Swiss phase's seeding. Everything is a function of the seed and the results, so a
resumed tournament replays the same rounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

import networkx as nx
import numpy as np
from scipy.special import expit, ndtr
from scipy.stats import norm

from tournaments.ratings import penalised_fit, sandwich_covariance
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
from tournaments.swiss import swiss
from tournaments.swiss import swiss_rounds as default_rounds

L2 = 0.1  # prior precision on theta (sd 3.2 logits, 550 Elo): keeps an undefeated player finite and early pairings sane
TOP = 2.0  # weight of the pairs that decide the winner in `kendall_weights` (docs/results/benchmarks.md#tournament-formats)
NEIGHBOURS = 4  # candidate opponents per player kept for the matching (the full graph only if they leave someone out)
CANDIDATES = 12  # opponents per player (best by info weight) whose Kendall weight is computed


def default_budget(n: int) -> int:
    """`max_matches` when none is given: 2 N log2 N games (768 at N = 64)."""
    return max(1, round(2 * n * math.log2(n)))


def adaptive(
    players: Sequence[Player],
    max_matches: int | None = None,
    width: int | None = None,
    level: float = 0.95,
    games: int = 1,
    swiss_rounds: int | None = None,
    seed: int = 0,
    weights: str = "kendall",
) -> FormatGen:
    """Swiss rounds, then information-weighted matchings; see the module doc.

    Args:
      max_matches: budget in games (a pairing of `games` games counts `games`), Swiss
        rounds included; default `default_budget(N)`. The last round may be partial.
      width: stop early once every rank interval spans at most `width` places
        (0 = every rank certain); None = play the whole budget.
      level: confidence of the pairwise comparisons behind the rank intervals.
      games: games per pairing.
      swiss_rounds: rounds of the Swiss phase (default ceil(log2 N), fewer if the budget
        is smaller).
      seed: the Swiss phase's random initial order.
      weights: pair weighting, a key of `WEIGHTS`.
    """
    players = check_players(players)
    check_count(games, "games")
    n = len(players)
    budget = default_budget(n) if max_matches is None else max_matches
    rounds = check_options(n, games, budget, width, level, weights, swiss_rounds)

    tally = Tally(players)
    opening = yield from swiss(players, rounds=rounds, games=games, seed=seed)
    for round_ in opening.rounds:
        for p, r in round_:
            tally.add(p, r)
        tally.rounds.append(round_)
    seating = _Seating(players)
    for p, _ in (pr for round_ in tally.rounds for pr in round_):
        seating.note(p.a, p.b)
    used = sum(p.games for round_ in tally.rounds for p, _ in round_)
    z = norm.ppf(0.5 + level / 2)
    stopped = "budget"
    r = 0
    theta = None
    while True:
        theta, cov = fit(players, tally.rounds, theta)
        lo, hi = rank_intervals(theta, cov, z)
        if width is not None and np.max(hi - lo) <= width:
            stopped = "settled"
            break
        left = (budget - used) // games
        if left < 1:
            break
        r += 1
        w = WEIGHTS[weights](theta, cov, seating.met)
        pairs = _matching(w)[:left]
        pairings = [
            seating.seat(
                *sorted((players[i], players[j]), key=lambda p: -theta[seating.index[p]]),
                f"A{r}",
                games,
            )
            for i, j in pairs
        ]
        used += len(pairings) * games
        yield from run_round(tally, pairings)
    return _outcome(players, tally, opening, theta, lo, hi, stopped)


def check_options(
    n: int,
    games: int,
    budget: object,
    width: object,
    level: object,
    weights: str,
    swiss_rounds: object,
    seats: int = 2,
) -> int:
    """Check `adaptive`'s options (ValueError); return the Swiss phase's rounds, cut to the
    budget. `seats`: players a round's pairing (2) or table (`tournaments.tables`) seats."""
    per_round = (n // seats) * games
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < per_round:
        what = "pairings" if seats == 2 else "tables"
        raise ValueError(
            f"max_matches must be an integer of at least one round ({per_round} games: {n // seats} {what} x {games}), got {budget!r}"
        )
    if width is not None and (not isinstance(width, int) or isinstance(width, bool) or width < 0):
        raise ValueError(f"width must be a non-negative integer (rank places), got {width!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r} (choose from {', '.join(WEIGHTS)})")
    rounds = default_rounds(n) if swiss_rounds is None else swiss_rounds
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"swiss_rounds must be a positive integer, got {rounds!r}")
    return min(rounds, budget // per_round)


class _Seating:
    """Who sat first how often, and how often each pair met: the seats of the next pairings."""

    def __init__(self, players: list[Player]):
        self.balance = {p: 0 for p in players}  # times listed first minus times listed second
        self.last_first: dict = {}  # pair -> who was listed first when they last met
        self.met = np.zeros((len(players), len(players)))
        self.index = {p: i for i, p in enumerate(players)}

    def note(self, a: Player, b: Player) -> None:
        """Record a pairing with `a` listed first."""
        self.balance[a] += 1
        self.balance[b] -= 1
        self.last_first[frozenset((a, b))] = a
        self.met[self.index[a], self.index[b]] += 1
        self.met[self.index[b], self.index[a]] += 1

    def seat(self, a: Player, b: Player, label: str, games: int) -> Pairing:
        """List first the player who sat first less often; on a tie, the one who sat second
        when they last met, else the stronger one (`a`)."""
        balance = self.balance
        if balance[b] < balance[a] or (
            balance[b] == balance[a] and self.last_first.get(frozenset((a, b))) == a
        ):
            a, b = b, a
        self.note(a, b)
        return Pairing(a, b, label, games)


def _outcome(
    players: list[Player],
    tally: Tally,
    opening: Outcome,
    theta: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    stopped: str,
) -> Outcome:
    """Rank by the final fit, ties broken by points, mean score, then the Swiss seeding."""
    index = {p: i for i, p in enumerate(players)}
    initial = {p: opening.stats[p]["seed"] for p in players}
    by_theta = {p: float(theta[index[p]]) for p in players}
    order = sort_players(
        players, lambda p: (by_theta[p], tally.points[p], tally.mean_score(p), -initial[p])
    )
    stats = tally.stats(
        theta=by_theta,
        rank_lo={p: int(lo[index[p]]) for p in players},
        rank_hi={p: int(hi[index[p]]) for p in players},
        stopped={p: stopped for p in players},
    )
    return Outcome(order, stats, tally.rounds)


def fit(
    players: list, rounds: list, start: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Bradley-Terry log-strengths of `players` and their covariance (model-based H^-1)
    from every (Pairing, PairResult) of `rounds`, the optimiser started at `start`; a
    pairing of k games counts k games at its mean points (the likelihood is linear in the
    points)."""
    index = {p: i for i, p in enumerate(players)}
    rows = [
        (index[p.a], index[p.b], r.points_a / r.games)
        for round_ in rounds
        for p, r in round_
        for _ in range(r.games)
    ]
    ia, ib, y = (
        (np.array(c) for c in zip(*rows))
        if rows
        else (np.zeros(0, int), np.zeros(0, int), np.zeros(0))
    )
    n = len(players)
    theta = penalised_fit(ia, ib, y, n, L2, start)
    return theta, sandwich_covariance(theta, ia, ib, y, n, L2)[1]


def rank_intervals(theta: np.ndarray, cov: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Each player's 1-based rank interval: lo = 1 + the players surely above it, hi = N -
    the players surely below it, "surely" meaning |theta_i - theta_j| > z * its s.e."""
    d = theta[:, None] - theta[None, :]
    se = np.sqrt(np.clip(_diff_var(cov), 1e-12, None))
    sure = d > z * se  # sure[i, j]: i above j
    return 1 + sure.sum(axis=0), len(theta) - sure.sum(axis=1)


def _diff_var(cov: np.ndarray) -> np.ndarray:
    """Var(theta_i - theta_j) for every pair."""
    v = np.diag(cov)
    return v[:, None] + v[None, :] - 2 * cov


def info_weights(theta: np.ndarray, cov: np.ndarray, met: np.ndarray) -> np.ndarray:
    """p(1-p) Var(theta_i - theta_j): the Fisher information of one more game times the
    uncertainty it acts on, halved for each game the pair already played."""
    p = expit(theta[:, None] - theta[None, :])
    return p * (1 - p) * _diff_var(cov) / (1 + met)


def kendall_weights(theta: np.ndarray, cov: np.ndarray, met: np.ndarray) -> np.ndarray:
    """How much one game (i, j) lowers the expected number of misordered pairs of the
    ranking, sum over (k, l) of Phi(-|d_kl| / s_kl) - Phi(-|d_kl| / s'_kl), with s' the
    s.e. after a rank-one Fisher update of the covariance along e_i - e_j; a pair (k, l)
    counts 1 + TOP N sqrt(P(k best) P(l best)) times, so the top is settled too. Computed
    for each player's CANDIDATES best pairs by `info_weights`, over the pairs (k, l) whose
    order is still in doubt, and divided by 1 + the games (i, j) already played (Swiss's
    lesson: a repeated pair tells less than a new one); any other pair weighs its info
    weight times a tiny factor."""
    n = len(theta)
    info = info_weights(theta, cov, np.zeros_like(met))
    d = np.abs(theta[:, None] - theta[None, :])
    var = np.clip(_diff_var(cov), 1e-12, None)
    k, l = np.triu_indices(n, 1)
    doubt = ndtr(-d[k, l] / np.sqrt(var[k, l])) > 1e-3
    k, l = k[doubt], l[doubt]
    best = p_best(theta, cov)
    pw = 1 + TOP * n * np.sqrt(best[k] * best[l])
    before = pw @ ndtr(-d[k, l] / np.sqrt(var[k, l]))
    i, j = np.array(_candidates(info, CANDIDATES)).T
    fisher = info[i, j] / var[i, j]  # p(1-p) of a game (i, j)
    u = cov[:, i] - cov[:, j]  # (players, candidates): Cov(theta, theta_i - theta_j)
    shrink = fisher * (u[k] - u[l]) ** 2 / (1 + fisher * var[i, j])  # (doubtful pairs, candidates)
    after = pw @ ndtr(
        -d[k, l][:, None] / np.sqrt(np.clip(var[k, l][:, None] - shrink, 1e-12, None))
    )
    out = info * 1e-6
    out[i, j] = out[j, i] = (before - after) / (1 + met[i, j])
    return out


def p_best(theta: np.ndarray, cov: np.ndarray, draws: int = 1000) -> np.ndarray:
    """Each player's probability of being the strongest under N(theta, cov) (Monte Carlo,
    a fixed seed: the same fit gives the same answer)."""
    sample = np.random.default_rng(0).multivariate_normal(theta, cov, draws, method="cholesky")
    return np.bincount(np.argmax(sample, axis=1), minlength=len(theta)) / draws


WEIGHTS = {"kendall": kendall_weights, "info": info_weights}


def _candidates(w: np.ndarray, neighbours: int = NEIGHBOURS) -> list[tuple[int, int]]:
    """Each player's `neighbours` highest-weight pairs, i < j, each once."""
    n = len(w)
    w = w.copy()
    np.fill_diagonal(w, -np.inf)
    keep = np.argsort(-w, axis=1, kind="stable")[:, :neighbours]
    return sorted({(min(i, j), max(i, j)) for i in range(n) for j in keep[i]})


def _matching(w: np.ndarray) -> list[tuple[int, int]]:
    """A maximum-weight matching of as many players as possible, heaviest pairs first.

    Over each player's NEIGHBOURS best pairs (fast), then 4x as many, then the complete
    graph, until no player is left out that the complete graph would pair."""
    n = len(w)
    for edges in (_candidates(w), _candidates(w, 4 * NEIGHBOURS), list(combinations(range(n), 2))):
        graph = nx.Graph()
        graph.add_nodes_from(range(n))
        graph.add_weighted_edges_from((i, j, float(w[i, j]) + 1e-12) for i, j in edges)
        pairs = nx.max_weight_matching(graph, maxcardinality=True)
        if len(pairs) == n // 2:
            break
    pairs = [(min(i, j), max(i, j)) for i, j in pairs]
    return sorted(pairs, key=lambda ij: (-w[ij], ij))
