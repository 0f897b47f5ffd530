"""Ratings from game results: Bradley-Terry with confidence intervals, OpenSkill, alpha-rank, Nash averaging.

Bradley-Terry: P(i beats j) = sigmoid(theta_i - theta_j [+ h if i moves first]).
`fit_bradley_terry` fits theta (and, with `seat`, the first mover's advantage h, one per
game, jointly, so the ratings are corrected for it) by maximum likelihood (scipy trust-exact
Newton) on games given as (a, b, points_a) with a draw as half a win, under a weak
Gaussian prior (`l2`) that keeps an undefeated player finite. Shown on the Elo scale,
elo = 400/ln(10) * theta + 1000, pinned so the `reference` player is exactly 1000, or
else the mean of the field (the largest group of players that took points from each
other: everyone, unless somebody won or lost every game). Confidence intervals:

    "sandwich"   robust (Huber-White) covariance H^-1 B H^-1 of the fit: H the Hessian of
                 the penalised log-loss, B the sum of per-game score outer products;
                 each player's variance is the larger of that and the model-based H^-1:
                 B alone collapses for a player with few games the fit predicts well
                 (one draw against an equal: a +-17 Elo interval)
    "bootstrap"  refit on games resampled with replacement, percentile interval

except that a record which leaves the rating unbounded on one side (won every game) gets
+-inf there and a profile-likelihood end on the other. Each rating also carries a rank
interval (1-3: as LMArena shows them) from pairwise tests: see `fit_bradley_terry`. `bradley_terry` returns just the ratings.

OpenSkill (Weng-Lin, PyPI `openskill`) rates matches of any number of players or teams.
For non-transitive populations (rock-paper-scissors among agents) a single number hides
the cycle: `alpha_rank` (OpenSpiel `egt.alpharank`) gives the stationary mass of an
evolutionary dynamics over the win-rate matrix, `nash_average` (OpenSpiel
`algorithms.nash_averaging`, needs `cvxpy`) the maximum-entropy Nash mixture of the
antisymmetric game P - P^T and each player's payoff against it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import openskill.models as om
import pyspiel
from scipy.linalg import null_space
from scipy.optimize import brentq, minimize
from scipy.special import expit
from scipy.stats import chi2, norm

ELO_SCALE = 400.0 / math.log(10.0)
ELO_BASE = 1000.0


@dataclass
class Rating:
    """A Bradley-Terry rating on the Elo scale."""

    elo: float  # 400/ln10 * (theta - theta_ref) + 1000
    lo: float  # lower end of the confidence interval (nan without games, -inf if no loss bounds it)
    hi: float  # upper end (+inf for a player nobody outside the players it beat took points from)
    theta: float  # the fitted log-strength, before pinning
    games: int  # games the player took part in
    rank_lo: int = (
        0  # best rank the data allow (1 = top), see `fit_bradley_terry`; 0 without intervals
    )
    rank_hi: int = 0  # worst rank


@dataclass
class SeatAdvantage:
    """The first mover's (seat 0's) advantage in a group of games (one game), fitted jointly
    with the ratings, on the Elo scale: P(a in seat 0 beats b) = sigmoid(theta_a - theta_b + h)."""

    elo: float  # 400/ln10 * h; positive: moving first helps
    lo: float  # confidence interval
    hi: float
    games: int  # games it was fitted on


@dataclass
class Fit:
    """What `fit_bradley_terry` knows: the ratings and, if asked for, the seat advantages."""

    ratings: dict[Hashable, Rating]
    seat: dict[Hashable, SeatAdvantage] = field(default_factory=dict)  # seat group -> its advantage


def elo(theta: float | np.ndarray, ref: float = 0.0) -> float | np.ndarray:
    """Log-strength to the Elo scale, `ref` mapped to 1000."""
    return ELO_SCALE * (np.asarray(theta) - ref) + ELO_BASE


def bradley_terry(
    games: Iterable[tuple[Hashable, Hashable, float]], *args, **kwargs
) -> dict[Hashable, Rating]:
    """{player: Rating} of `fit_bradley_terry` (the same arguments)."""
    return fit_bradley_terry(games, *args, **kwargs).ratings


def fit_bradley_terry(
    games: Iterable[tuple[Hashable, Hashable, float]],
    players: Sequence[Hashable] | None = None,
    reference: Hashable | None = None,
    ci: str | None = "sandwich",
    level: float = 0.95,
    bootstrap: int = 200,
    seed: int = 0,
    l2: float = 0.01,
    seat: bool | Sequence[Hashable] = False,
    ranks: bool = True,
) -> Fit:
    """Fit Bradley-Terry to games (a, b, points of a in [0, 1]); ratings on the Elo scale.

    Intervals. A player whose record leaves a direction unbounded (it won every game, or
    more generally no player outside the set of players that took points from it did: the
    maximum-likelihood rating is +infinity) gets that end at +-inf and the other end from
    the profile likelihood (the penalised log-likelihood maximised over everyone else with
    this player's shown rating held fixed, cut at the chi-square quantile of `level`): an
    undefeated player's interval starts above the field and has no upper end, instead of a
    symmetric Wald interval around a value only the prior decides. Every other player gets
    the `ci` interval.

    Rank intervals (`Rating.rank_lo`-`rank_hi`), from pairwise tests of the rating
    differences, whatever `ci` is: player i's range runs from 1 + #{j surely above i} to
    n - #{j surely below i}, each of its m - 1 comparisons tested at level
    1 - (1 - level)/(m - 1) (Bonferroni), so that its range holds its true rank with
    probability >= `level`. Wald tests with the sandwich variance rule; a likelihood-ratio
    test (constrained refit) where the difference is unbounded, e.g. against an unbeaten
    player. Two players share a range unless the data tell them apart.

    Args:
      games: one tuple per game; points_a is 1 (a won), 0.5 (draw) or 0 (b won).
      players: everyone to rate (default: everyone who played), in display order.
      reference: pinned at 1000 Elo (its interval is then a point); None = the field's
        mean at 1000 (the players that took points from each other, see the module doc).
      ci: "sandwich" | "bootstrap" | None (no rating or rank intervals).
      level: confidence level of the interval.
      bootstrap: resamples for ci="bootstrap".
      l2: prior precision on theta (and the seat term); keeps undefeated players finite.
      seat: a is the first mover (seat 0) of each game: fit the first mover's advantage
        jointly, the ratings then corrected for it. True: one term for all games (key
        "all" of `Fit.seat`); a sequence with one label per game (its game's name): one
        term per label, as the first move is worth more in some games than in others.
      ranks: compute the rank intervals (False: rank_lo = rank_hi = 0). They cost a
        constrained refit per pair of players whose difference is unbounded and not
        settled by a quick bound (timing: docs/results/benchmarks.md#tournament-formats).
    Returns:
      Fit(ratings={player: Rating}, seat={label: SeatAdvantage})
    """
    games = [(a, b, float(s)) for a, b, s in games]
    players = list(players) if players is not None else _who_played(games)
    index = {p: i for i, p in enumerate(players)}
    _check_games(games, index, reference, ci)
    n = len(players)
    ia, ib, y, labels, groups, X = _games_design(games, index, n, seat)
    played = np.bincount(np.concatenate([ia, ib]), minlength=n)
    model = Logistic(X, y, l2)
    ref = None if reference is None else index[reference]
    options = FitOptions(ci, level, bootstrap, seed, ranks)
    ratings, x, cov = fit_ratings(model, players, _took_points(ia, ib, y, n), played, ref, options)
    seats = _seat_terms(x, n, labels, groups)
    if cov is not None:
        seat_intervals(seats, groups, *cov, n, level)
    return Fit(ratings, seats)


@dataclass
class FitOptions:
    """How `fit_ratings` computes intervals (the arguments of `fit_bradley_terry`)."""

    ci: str | None = "sandwich"
    level: float = 0.95
    bootstrap: int = 200
    seed: int = 0
    ranks: bool = True


class Logistic:
    """Bradley-Terry's penalised log-loss over a design: row k of X picks theta_a - theta_b
    (+ a seat term) of game k, y[k] the points of a; each game an independent unit.

    The interface every rating model gives `fit_ratings` (`tournaments.plackett_luce.
    PlackettLuce` is the other): `width` parameters, `units` independent units (games,
    matches), `nll(x)` (objective and gradient), `hessian(x)`, `scores(x)` (each unit's
    gradient of its log-likelihood, a row each) and `resample(pick)` (the model of units
    `pick`, for the bootstrap)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, l2: float):
        self.X, self.y, self.l2 = X, y, l2
        self.width, self.units = X.shape[1], len(y)

    def nll(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        return _penalised_nll(x, self.X, self.y, self.l2)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        return _penalised_hessian(x, self.X, self.l2)

    def scores(self, x: np.ndarray) -> np.ndarray:
        return self.X * (self.y - expit(self.X @ x))[:, None]

    def resample(self, pick: np.ndarray) -> Logistic:
        return Logistic(self.X[pick], self.y[pick], self.l2)


def fit_ratings(
    model,
    players: Sequence[Hashable],
    graph,
    played: np.ndarray,
    reference: int | None,
    options: FitOptions,
) -> tuple[dict[Hashable, Rating], np.ndarray, tuple | None]:
    """Fit `model` (`Logistic` or any model of its interface, the players its first
    parameters) and rate the players as `fit_bradley_terry` describes: Elo scale, pinned
    to player index `reference` or the field of `graph` (who took points from whom), rating
    and rank intervals. Returns ({player: Rating}, the fitted parameters, (robust, model-based)
    covariance or None without intervals)."""
    n = len(players)
    x = fit_model(model)
    anchor = {reference} if reference is not None else _field(graph)
    T = _display_map(n, anchor, model.width)
    shown = elo(T @ x)
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    rank_lo, rank_hi = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    cov = None
    if options.ci is not None and model.units:
        fit = (x, model, T)
        cov = robust, based = _sandwich(model, x)
        free_up, free_down = _unbounded(graph, anchor)
        lo, hi = _rating_intervals(
            fit, robust, based, shown, free_up, free_down, played, options.level
        )
        if options.ci == "bootstrap":
            bounded = ~(free_up | free_down)
            _bootstrap_intervals(
                fit, lo, hi, bounded, options.level, options.bootstrap, options.seed
            )
        if options.ranks:
            rank_lo, rank_hi = _rank_ranges(
                x, model, T, robust, based, graph, played > 0, options.level
            )
        if reference is not None:
            lo[reference] = hi[reference] = ELO_BASE
    return _ratings(players, shown, lo, hi, x, played, rank_lo, rank_hi), x, cov


def _who_played(games: list[tuple[Hashable, Hashable, float]]) -> list[Hashable]:
    """Everyone named in `games`, in order of first appearance."""
    return list(dict.fromkeys(p for a, b, _ in games for p in (a, b)))


def _check_games(
    games: list[tuple[Hashable, Hashable, float]],
    index: dict[Hashable, int],
    reference: Hashable | None,
    ci: str | None,
) -> None:
    """Raise ValueError for a game naming an unrated player or points outside [0, 1], an
    unrated reference or an unknown `ci`."""
    for a, b, s in games:
        if a not in index or b not in index:
            raise ValueError(f"game between {a!r} and {b!r} names a player not in the rated list")
        if not 0.0 <= s <= 1.0:
            raise ValueError(f"points must lie in [0, 1], got {s} for {a!r} vs {b!r}")
    if reference is not None and reference not in index:
        raise ValueError(f"reference player {reference!r} is not among the rated players")
    if ci not in ("sandwich", "bootstrap", None):
        raise ValueError(f"ci must be 'sandwich', 'bootstrap' or None, got {ci!r}")


def _games_design(
    games: list[tuple[Hashable, Hashable, float]],
    index: dict[Hashable, int],
    n: int,
    seat: bool | Sequence[Hashable],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list, list, np.ndarray]:
    """The games as arrays: (ia, ib, y, seat labels per game, distinct labels, design X)."""
    ia = np.array([index[a] for a, _, _ in games], dtype=int)
    ib = np.array([index[b] for _, b, _ in games], dtype=int)
    y = np.array([s for _, _, s in games], dtype=float)
    labels = ["all"] * len(games) if seat is True else list(seat) if seat else []
    if labels and len(labels) != len(games):
        raise ValueError(f"seat labels: need one per game ({len(games)}), got {len(labels)}")
    groups = list(dict.fromkeys(labels))
    X = _design(ia, ib, n, [groups.index(g) for g in labels], len(groups))
    return ia, ib, y, labels, groups, X


def _display_map(n: int, anchor: set[int], width: int) -> np.ndarray:
    """T with displayed value = T @ x: relative to the reference, or to the field's mean (the
    seat terms, after the players in x, are not shown)."""
    w = np.zeros(n)
    w[list(anchor)] = 1.0 / len(anchor)
    return np.hstack([np.eye(n) - np.outer(np.ones(n), w), np.zeros((n, width - n))])


def _seat_terms(x: np.ndarray, n: int, labels: list, groups: list) -> dict[Hashable, SeatAdvantage]:
    """{label: SeatAdvantage} of the fitted seat terms (after the n players in x), no interval yet."""
    counts = {g: labels.count(g) for g in groups}
    return {
        g: SeatAdvantage(float(ELO_SCALE * x[n + k]), math.nan, math.nan, counts[g])
        for k, g in enumerate(groups)
    }


def _rating_intervals(
    fit: tuple, robust, model, shown, free_up, free_down, played, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per player on the Elo scale: the sandwich interval (each variance the larger of
    the robust and the model-based one), or +-inf and a profile-likelihood end where the record
    leaves the rating unbounded. `fit` is (x, the model, T)."""
    x, lik, T = fit
    var = np.maximum(np.diag(T @ robust @ T.T), np.diag(T @ model @ T.T))
    se = ELO_SCALE * np.sqrt(np.clip(var, 0.0, None))
    return _interval_ends(shown, se, level, free_up, free_down, x, lik, T, played)


def _bootstrap_intervals(
    fit: tuple, lo, hi, bounded, level: float, bootstrap: int, seed: int
) -> None:
    """Replace `lo`, `hi` of the `bounded` players by the percentile interval of `bootstrap`
    refits on units (games, matches) resampled with replacement. `fit` is (x, the model, T)."""
    x, model, T = fit
    rng = np.random.default_rng(seed)
    draws = np.empty((bootstrap, len(lo)))
    for k in range(bootstrap):
        pick = rng.integers(0, model.units, model.units)
        draws[k] = elo(T @ fit_model(model.resample(pick), x))
    alpha = (1 - level) / 2
    lo[bounded] = np.quantile(draws, alpha, axis=0)[bounded]
    hi[bounded] = np.quantile(draws, 1 - alpha, axis=0)[bounded]


def seat_intervals(
    seats: dict[Hashable, SeatAdvantage], groups: list, robust, model, n: int, level: float
) -> None:
    """Set each seat advantage's Wald interval (the larger of the robust and model variances)."""
    z = norm.ppf(0.5 + level / 2)
    for k, g in enumerate(groups):
        h_se = ELO_SCALE * math.sqrt(max(robust[n + k, n + k], model[n + k, n + k]))
        seats[g].lo, seats[g].hi = seats[g].elo - z * h_se, seats[g].elo + z * h_se


def _ratings(players, shown, lo, hi, x, played, rank_lo, rank_hi) -> dict[Hashable, Rating]:
    """{player: Rating}; a player without games gets a nan interval."""
    return {
        p: Rating(
            float(shown[i]),
            float(lo[i]) if played[i] else math.nan,
            float(hi[i]) if played[i] else math.nan,
            float(x[i]),
            int(played[i]),
            int(rank_lo[i]),
            int(rank_hi[i]),
        )
        for i, p in enumerate(players)
    }


def _rank_ranges(x, lik, T, robust, model, graph, played, level) -> tuple[np.ndarray, np.ndarray]:
    """(best, worst) rank per player: 1 + #{j surely above i}, n - #{j surely below i}.

    "Surely above": the difference of the two ratings is positive at level
    1 - (1 - level)/(m - 1), m the players that played (Bonferroni over a player's m - 1
    comparisons, so each player's range holds with probability >= level). The test is
    Wald on the difference with the sandwich rule (the larger of the robust and the
    model-based variance), or, where the difference is unbounded on one side (no player
    beaten by i took points from j or anyone above it), the likelihood-ratio test of equal
    ratings, a constrained refit."""
    n = len(played)
    m = max(int(played.sum()), 2)
    z = norm.ppf(1 - (1 - level) / (2 * (m - 1)))
    cut = chi2.ppf(1 - (1 - level) / (m - 1), 1)
    d = T @ x
    var = np.maximum.reduce(
        [
            np.diag(V)[:, None] + np.diag(V)[None, :] - 2 * V
            for V in (T @ robust @ T.T, T @ model @ T.T)
        ]
    )
    above = d[:, None] - d[None, :] > z * np.sqrt(
        np.clip(var, 0.0, None)
    )  # above[i, j]: i surely above j
    f_min = lik.nll(x)[0]
    for i in np.flatnonzero(played):
        up, down = nx.ancestors(graph, i) | {i}, nx.descendants(graph, i) | {i}
        for j in np.flatnonzero(played):
            if j == i or (j in up and j in down):
                continue
            if (
                j in down
            ):  # i - j unbounded above only: i above j unless equal ratings fit well enough
                a = T[i] - T[j]
                # a quick upper bound on the refit's deviance first: most pairs stop there
                above[i, j] = (
                    2 * (_equal_ratings_bound(x, lik, a) - f_min) > cut
                    and _profile_deviance(x, lik, a)(0.0) > cut
                )
            else:
                above[i, j] = False
    above &= played[:, None] & played[None, :]
    return 1 + above.sum(axis=0), n - above.sum(axis=1)


def _equal_ratings_bound(x: np.ndarray, lik, a: np.ndarray) -> float:
    """The penalised log-loss at a point with a @ x = 0 (i's and j's ratings met halfway,
    then one Newton step within a @ x = 0, kept only if it lowers the loss): at least the
    constrained minimum, so a deviance from it below the cut settles the test."""
    x0 = x - (a @ x) * a / (a @ a)
    f0, g = lik.nll(x0)
    Hg, Ha = np.linalg.solve(lik.hessian(x0), np.column_stack([g, a])).T
    step = -Hg + Ha * (a @ Hg) / (a @ Ha)  # the quadratic model's minimiser on a @ step = 0
    for t in (1.0, 0.5, 0.25):
        f1 = lik.nll(x0 + t * step)[0]
        if f1 < f0:
            return f1
    return f0


def _interval_ends(
    shown, se, level, free_up, free_down, x, lik, T, played
) -> tuple[np.ndarray, np.ndarray]:
    """Wald ends at `level`; for a record unbounded on one side, +-inf there and the profile
    likelihood end on the other."""
    z = norm.ppf(0.5 + level / 2)
    lo, hi = shown - z * se, shown + z * se
    lo[free_down], hi[free_up] = -np.inf, np.inf
    cut = chi2.ppf(level, 1)
    for i in np.flatnonzero((free_up ^ free_down) & (played > 0)):
        end = _profile_end(x, lik, T[i], -1.0 if free_up[i] else 1.0, cut)
        if free_up[i]:
            lo[i] = end
        else:
            hi[i] = end
    return lo, hi


def _took_points(ia: np.ndarray, ib: np.ndarray, y: np.ndarray, n: int):
    """networkx DiGraph with an edge i -> j when i took points from j in some game."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((int(a), int(b)) for a, b, s in zip(ia, ib, y) if s > 0)
    graph.add_edges_from((int(b), int(a)) for a, b, s in zip(ia, ib, y) if s < 1)
    return graph


def _field(graph) -> set[int]:
    """The largest group of players that all took points from each other, directly or
    through others (a strongly connected component): everyone unless somebody won or lost
    all its games. Everyone, too, when no group of two or more is the one largest."""
    groups = sorted(nx.strongly_connected_components(graph), key=len, reverse=True)
    if groups and len(groups[0]) >= 2 and (len(groups) == 1 or len(groups[1]) < len(groups[0])):
        return groups[0]
    return set(graph.nodes)


def _unbounded(graph, anchor: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """(rating unbounded above, unbounded below) per player, relative to the `anchor`
    players (the reference, or the field) its shown rating is measured from.

    Raising i together with every player that can reach i in the took-points-from graph
    (who took points from i, from them, ...) never lowers the likelihood: nobody outside
    that set took a point from it. i's shown rating then grows without bound unless the
    set holds the whole anchor. Likewise downwards with the players i can reach."""
    n = graph.number_of_nodes()
    up, down = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for i in range(n):
        up[i] = not anchor <= nx.ancestors(graph, i) | {i}
        down[i] = not anchor <= nx.descendants(graph, i) | {i}
    return up, down


def _profile_end(x: np.ndarray, lik, a: np.ndarray, direction: float, cut: float) -> float:
    """Where the profile penalised deviance of the shown value a @ x, walked from the fit
    in `direction`, reaches `cut`; on the Elo scale (the end of a profile-likelihood interval)."""
    profile = _profile_deviance(x, lik, a)
    deviance = lambda c: profile(c) - cut
    start = a @ x
    inner, step = start, 0.5
    for _ in range(30):
        outer = start + direction * step
        if deviance(outer) > 0:
            return float(elo(brentq(deviance, inner, outer, xtol=1e-4)))
        inner, step = outer, 2 * step
    return math.copysign(math.inf, direction)


def _profile_deviance(x: np.ndarray, lik, a: np.ndarray):
    """c -> 2 (min of the penalised log-loss over fits with a @ x = c, minus its minimum)."""
    N = null_space(a[None, :])  # x = c a/|a|^2 + N u
    base = a / (a @ a)
    f_min = lik.nll(x)[0]
    warm = [N.T @ x]

    def deviance(c: float) -> float:
        def loss(u):
            f, g = lik.nll(c * base + N @ u)
            return f, N.T @ g

        def hess(u):
            return N.T @ lik.hessian(c * base + N @ u) @ N

        warm[0] = minimize(
            loss, warm[0], jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-8}
        ).x
        return 2 * (loss(warm[0])[0] - f_min)

    return deviance


def _penalised_nll(
    x: np.ndarray, X: np.ndarray, y: np.ndarray, l2: float
) -> tuple[float, np.ndarray]:
    """The fit's objective (log-loss plus the Gaussian prior) and its gradient."""
    d = X @ x
    # -[y log p + (1-y) log(1-p)] written stably with logaddexp
    nll = np.sum(y * np.logaddexp(0, -d) + (1 - y) * np.logaddexp(0, d)) + 0.5 * l2 * x @ x
    return nll, X.T @ (expit(d) - y) + l2 * x


def _penalised_hessian(x: np.ndarray, X: np.ndarray, l2: float) -> np.ndarray:
    p = expit(X @ x)
    return (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(X.shape[1])


def penalised_fit(
    ia: np.ndarray, ib: np.ndarray, y: np.ndarray, n: int, l2: float, x0: np.ndarray | None = None
) -> np.ndarray:
    """Penalised maximum likelihood of the Bradley-Terry strengths theta (no seat term).

    Args:
        ia: player index of each game's first seat.
        ib: player index of each game's second seat.
        y: points of the first seat in each game (1 win, 1/2 draw, 0 loss).
        n: number of players.
        l2: the ridge penalty on theta.
        x0: starting point (default zeros).

    Returns:
        theta, one strength per player (natural log-odds scale).
    """
    return fit_model(Logistic(_design(ia, ib, n), y, l2), x0)


def fit_model(model, x0: np.ndarray | None = None) -> np.ndarray:
    """Penalised maximum likelihood: Newton steps with the exact Hessian (scipy trust-exact)."""
    x0 = np.zeros(model.width) if x0 is None else x0
    return minimize(
        model.nll, x0, jac=True, hess=model.hessian, method="trust-exact", options={"gtol": 1e-8}
    ).x


def _design(
    ia: np.ndarray, ib: np.ndarray, n: int, seat_group: Sequence[int] = (), groups: int = 0
) -> np.ndarray:
    """(games, players + seat groups) matrix with +1 for a, -1 for b and 1 in the game's
    seat-group column: theta_a - theta_b [+ h_group] = X @ x."""
    X = np.zeros((len(ia), n + groups))
    X[np.arange(len(ia)), ia] += 1.0
    X[np.arange(len(ia)), ib] -= 1.0
    if groups:
        X[np.arange(len(ia)), n + np.asarray(seat_group, dtype=int)] = 1.0
    return X


def sandwich_covariance(
    theta: np.ndarray, ia: np.ndarray, ib: np.ndarray, y: np.ndarray, n: int, l2: float
) -> tuple[np.ndarray, np.ndarray]:
    """Covariances of a `penalised_fit` theta (no seat term).

    Args:
        theta: the fitted strengths.
        ia: first seats, as in `penalised_fit`.
        ib: second seats.
        y: points of the first seat.
        n: number of players.
        l2: the ridge penalty it was fitted with.

    Returns:
        (robust covariance H^-1 B H^-1, model-based covariance H^-1).
    """
    return _sandwich(Logistic(_design(ia, ib, n), y, l2), theta)


def _sandwich(model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(robust H^-1 B H^-1, model-based H^-1): B the sum of the units' score outer products."""
    H = model.hessian(x)
    G = model.scores(x)  # per-unit score
    B = G.T @ G
    Hinv = np.linalg.inv(H)
    return Hinv @ B @ Hinv, Hinv


@dataclass
class SkillRating:
    """An OpenSkill (Weng-Lin) rating."""

    mu: float  # mean skill
    sigma: float  # uncertainty
    ordinal: float  # mu - 3 sigma: a conservative display value
    matches: int  # matches rated


def openskill_ratings(
    results: Iterable[Mapping[Any, float]], model: str = "PlackettLuce"
) -> dict[Hashable, SkillRating]:
    """OpenSkill ratings from matches of any size, in order.

    Each result maps a side to its score (higher is better); a side is a player or a tuple
    of players (a team). `model`: any class of `openskill.models` ("PlackettLuce",
    "BradleyTerryFull", "ThurstoneMostellerFull", ...).
    """
    if model not in om.MODELS and not hasattr(om, model):
        raise ValueError(
            f"unknown openskill model {model!r} (choose from {', '.join(sorted(m.__name__ for m in om.MODELS))})"
        )
    rater = getattr(om, model)()
    current: dict = {}
    counts: dict = {}
    for result in results:
        if len(result) < 2:
            raise ValueError(f"an openskill match needs at least two sides, got {dict(result)}")
        sides = [side if isinstance(side, tuple) else (side,) for side in result]
        teams = [[current.setdefault(p, rater.rating(name=str(p))) for p in side] for side in sides]
        rated = rater.rate(teams, scores=[float(s) for s in result.values()])
        for side, team in zip(sides, rated):
            for p, r in zip(side, team):
                current[p] = r
                counts[p] = counts.get(p, 0) + 1
    return {p: SkillRating(r.mu, r.sigma, r.ordinal(), counts[p]) for p, r in current.items()}


def win_matrix(
    games: Iterable[tuple[Hashable, Hashable, float]], players: Sequence[Hashable]
) -> tuple[np.ndarray, np.ndarray]:
    """(points, games) matrices: points[i, j] = points i took from j, games[i, j] = games played."""
    index = {p: i for i, p in enumerate(players)}
    n = len(players)
    pts, cnt = np.zeros((n, n)), np.zeros((n, n))
    for a, b, s in games:
        i, j = index[a], index[b]
        pts[i, j] += s
        pts[j, i] += 1 - s
        cnt[i, j] += 1
        cnt[j, i] += 1
    return pts, cnt


def win_rates(
    games: Iterable[tuple[Hashable, Hashable, float]], players: Sequence[Hashable]
) -> np.ndarray:
    """P[i, j] = share of points i took from j; 0.5 on the diagonal and for unplayed pairs."""
    pts, cnt = win_matrix(games, players)
    with np.errstate(invalid="ignore", divide="ignore"):
        P = np.where(cnt > 0, pts / np.maximum(cnt, 1), 0.5)
    np.fill_diagonal(P, 0.5)
    return P


def alpha_rank(P: np.ndarray, alpha: float = 10.0, population: int = 50) -> np.ndarray:
    """Alpha-rank stationary mass per player from the win-rate matrix P (OpenSpiel).

    The players are the strategies of a symmetric one-population game whose payoff to i
    against j is P[i, j]; more mass = more evolutionarily robust.
    """
    from open_spiel.python.egt import alpharank  # start-up time: matplotlib, which it imports

    P = np.asarray(P, dtype=float)
    _check_square(P)
    _, _, pi, _, _ = alpharank.compute([P], m=population, alpha=alpha)
    return _simplex(pi)


def nash_average(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nash averaging (OpenSpiel) of the win-rate matrix P.

    Returns (maxent Nash mixture over the players, each player's expected payoff against
    it in the antisymmetric game A = P - P^T); a player with payoff 0 is in the "Nash
    support"-level of play, negative payoffs are beaten by the mixture.
    """
    try:
        from open_spiel.python.algorithms import nash_averaging  # optional: cvxpy
    except ImportError as e:  # cvxpy is an optional dependency of OpenSpiel's nash_averaging
        raise ImportError(
            f"Nash averaging needs OpenSpiel with cvxpy ({e}); pip install cvxpy"
        ) from e
    P = np.asarray(P, dtype=float)
    _check_square(P)
    A = P - P.T
    game = pyspiel.create_matrix_game(A.tolist(), (-A).tolist())
    mixture, payoff = nash_averaging.nash_averaging(game)
    return _simplex(mixture), np.asarray(payoff, dtype=float).ravel()


def _simplex(x) -> np.ndarray:
    """Solver output as a distribution: round-off negatives clipped, renormalised."""
    x = np.clip(np.asarray(x, dtype=float).ravel(), 0.0, None)
    return x / x.sum()


def _check_square(P: np.ndarray) -> None:
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 2:
        raise ValueError(
            f"need a square win-rate matrix over at least 2 players, got shape {P.shape}"
        )
