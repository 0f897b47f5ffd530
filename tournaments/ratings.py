"""Ratings from game results: Bradley-Terry with confidence intervals, OpenSkill, alpha-rank, Nash averaging.

Bradley-Terry: P(i beats j) = sigmoid(theta_i - theta_j). `bradley_terry` fits theta by
maximum likelihood (scipy trust-exact Newton) on games given as (a, b, points_a) with a draw as half a
win, under a weak Gaussian prior (`l2`) that keeps an undefeated player finite. Shown on
the Elo scale, elo = 400/ln(10) * theta + 1000, pinned so the `reference` player is
exactly 1000 (or the mean is 1000 when there is none). Confidence intervals:

    "sandwich"   robust (Huber-White) covariance H^-1 B H^-1 of the fit: H the Hessian of
                 the penalised log-loss, B the sum of per-game score outer products;
                 each player's variance is the larger of that and the model-based H^-1:
                 B alone collapses for a player with few games the fit predicts well
                 (one draw against an equal: a +-17 Elo interval)
    "bootstrap"  refit on games resampled with replacement, percentile interval

OpenSkill (Weng-Lin, PyPI `openskill`) rates matches of any number of players or teams.
For non-transitive populations (rock-paper-scissors among agents) a single number hides
the cycle: `alpha_rank` (OpenSpiel `egt.alpharank`) gives the stationary mass of an
evolutionary dynamics over the win-rate matrix, `nash_average` (OpenSpiel
`algorithms.nash_averaging`, needs `cvxpy`) the maximum-entropy Nash mixture of the
antisymmetric game P - P^T and each player's payoff against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import norm

ELO_SCALE = 400.0 / math.log(10.0)
ELO_BASE = 1000.0


@dataclass
class Rating:
    """A Bradley-Terry rating on the Elo scale."""

    elo: float  # 400/ln10 * (theta - theta_ref) + 1000
    lo: float  # lower end of the confidence interval (nan without games)
    hi: float  # upper end
    theta: float  # the fitted log-strength, before pinning
    games: int  # games the player took part in


def elo(theta: float | np.ndarray, ref: float = 0.0) -> float | np.ndarray:
    """Log-strength to the Elo scale, `ref` mapped to 1000."""
    return ELO_SCALE * (np.asarray(theta) - ref) + ELO_BASE


def bradley_terry(
    games: Iterable[tuple[Hashable, Hashable, float]],
    players: Sequence[Hashable] | None = None,
    reference: Hashable | None = None,
    ci: str | None = "sandwich",
    level: float = 0.95,
    bootstrap: int = 200,
    seed: int = 0,
    l2: float = 0.01,
) -> dict[Hashable, Rating]:
    """Fit Bradley-Terry to games (a, b, points of a in [0, 1]); ratings on the Elo scale.

    Args:
      games: one tuple per game; points_a is 1 (a won), 0.5 (draw) or 0 (b won).
      players: everyone to rate (default: everyone who played), in display order.
      reference: pinned at 1000 Elo (its interval is then a point); None = mean at 1000.
      ci: "sandwich" | "bootstrap" | None.
      level: confidence level of the interval.
      bootstrap: resamples for ci="bootstrap".
      l2: prior precision on theta; keeps undefeated players finite.
    Returns:
      {player: Rating}
    """
    games = [(a, b, float(s)) for a, b, s in games]
    if players is None:
        players = list(dict.fromkeys(p for a, b, _ in games for p in (a, b)))
    players = list(players)
    index = {p: i for i, p in enumerate(players)}
    for a, b, s in games:
        if a not in index or b not in index:
            raise ValueError(f"game between {a!r} and {b!r} names a player not in the rated list")
        if not 0.0 <= s <= 1.0:
            raise ValueError(f"points must lie in [0, 1], got {s} for {a!r} vs {b!r}")
    if reference is not None and reference not in index:
        raise ValueError(f"reference player {reference!r} is not among the rated players")
    if ci not in ("sandwich", "bootstrap", None):
        raise ValueError(f"ci must be 'sandwich', 'bootstrap' or None, got {ci!r}")
    n = len(players)
    ia = np.array([index[a] for a, _, _ in games], dtype=int)
    ib = np.array([index[b] for _, b, _ in games], dtype=int)
    y = np.array([s for _, _, s in games], dtype=float)
    theta = _fit(ia, ib, y, n, l2)
    # displayed value = T @ theta: relative to the reference, or to the mean
    T = np.eye(n) - (np.outer(np.ones(n), np.eye(n)[index[reference]]) if reference is not None else np.full((n, n), 1.0 / n))
    shown = elo(T @ theta)
    lo = np.full(n, np.nan)
    hi = np.full(n, np.nan)
    z = norm.ppf(0.5 + level / 2)
    if ci == "sandwich" and len(games):
        robust, model = _sandwich(theta, ia, ib, y, n, l2)
        var = np.maximum(np.diag(T @ robust @ T.T), np.diag(T @ model @ T.T))
        se = ELO_SCALE * np.sqrt(np.clip(var, 0.0, None))
        lo, hi = shown - z * se, shown + z * se
    elif ci == "bootstrap" and len(games):
        rng = np.random.default_rng(seed)
        draws = np.empty((bootstrap, n))
        for k in range(bootstrap):
            pick = rng.integers(0, len(games), len(games))
            draws[k] = elo(T @ _fit(ia[pick], ib[pick], y[pick], n, l2, theta))
        alpha = (1 - level) / 2
        lo, hi = np.quantile(draws, alpha, axis=0), np.quantile(draws, 1 - alpha, axis=0)
    played = np.bincount(np.concatenate([ia, ib]), minlength=n)
    return {
        p: Rating(float(shown[i]), float(lo[i]) if played[i] else math.nan, float(hi[i]) if played[i] else math.nan, float(theta[i]), int(played[i]))
        for i, p in enumerate(players)
    }


def _fit(ia: np.ndarray, ib: np.ndarray, y: np.ndarray, n: int, l2: float, x0: np.ndarray | None = None) -> np.ndarray:
    """Penalised maximum likelihood: Newton steps with the exact Hessian (scipy trust-exact)."""
    X = _design(ia, ib, n)

    def loss(theta):
        d = X @ theta
        # -[y log p + (1-y) log(1-p)] written stably with logaddexp
        nll = np.sum(y * np.logaddexp(0, -d) + (1 - y) * np.logaddexp(0, d)) + 0.5 * l2 * theta @ theta
        return nll, X.T @ (expit(d) - y) + l2 * theta

    def hess(theta):
        p = expit(X @ theta)
        return (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(n)

    x0 = np.zeros(n) if x0 is None else x0
    return minimize(loss, x0, jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-8}).x


def _design(ia: np.ndarray, ib: np.ndarray, n: int) -> np.ndarray:
    """(games, players) matrix with +1 for a, -1 for b: theta_a - theta_b = X @ theta."""
    X = np.zeros((len(ia), n))
    X[np.arange(len(ia)), ia] += 1.0
    X[np.arange(len(ia)), ib] -= 1.0
    return X


def _sandwich(theta: np.ndarray, ia: np.ndarray, ib: np.ndarray, y: np.ndarray, n: int, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """(robust covariance H^-1 B H^-1, model-based covariance H^-1)"""
    X = _design(ia, ib, n)
    p = expit(X @ theta)
    H = (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(n)
    G = X * (y - p)[:, None]  # per-game score
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


def openskill_ratings(results: Iterable[Mapping[Any, float]], model: str = "PlackettLuce") -> dict[Hashable, SkillRating]:
    """OpenSkill ratings from matches of any size, in order.

    Each result maps a side to its score (higher is better); a side is a player or a tuple
    of players (a team). `model`: any class of `openskill.models` ("PlackettLuce",
    "BradleyTerryFull", "ThurstoneMostellerFull", ...).
    """
    import openskill.models as om

    if model not in om.MODELS and not hasattr(om, model):
        raise ValueError(f"unknown openskill model {model!r} (choose from {', '.join(sorted(m.__name__ for m in om.MODELS))})")
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


def win_matrix(games: Iterable[tuple[Hashable, Hashable, float]], players: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
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


def win_rates(games: Iterable[tuple[Hashable, Hashable, float]], players: Sequence[Hashable]) -> np.ndarray:
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
    from open_spiel.python.egt import alpharank

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
        import pyspiel
        from open_spiel.python.algorithms import nash_averaging
    except ImportError as e:  # cvxpy is an optional dependency of OpenSpiel's nash_averaging
        raise ImportError(f"Nash averaging needs OpenSpiel with cvxpy ({e}); pip install cvxpy") from e
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
        raise ValueError(f"need a square win-rate matrix over at least 2 players, got shape {P.shape}")
