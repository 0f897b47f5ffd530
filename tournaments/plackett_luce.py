"""Plackett-Luce ratings: Bradley-Terry's model for finishing orders of N players or teams.

A game's sides (players, or teams of players: `tournaments.rounds.Finish`) finish in an
order; side k's strength is exp(u_k), u_k the sum of its members' log-strengths theta (and,
with seat terms, of the terms of the seats they sat in). The probability of an order is
the product over places of "this side beats everyone still in":

    P(c_1 > c_2 > ... > c_m) = prod_k exp(u_{c_k}) / sum_{l >= k} exp(u_{c_l})

With two sides it is Bradley-Terry, P(a beats b) = sigmoid(u_a - u_b).

Ties. Sides with equal results count as every order of them at once, each with an equal
share of the game's weight: the log-likelihood of a tie is the mean of the log-likelihoods
of a balanced set of tie-breaks (each tied side in each place, and each pair of them in
both orders, equally often: the m rotations of the tied group and their reverses, which is
every order for m <= 3). With two sides that is Bradley-Terry's draw as half a win and half
a loss, so a two-player tournament gets the same ratings from either model. It is a
composite likelihood (not a Davidson tie parameter, nor Breslow's or Efron's
approximation, which weigh a two-player draw twice as much as a decided game): the
sandwich intervals account for it.

Seat terms (`seat=True`): one per game (`Finish.label`) and seat but the last, the
advantage of sitting there over the last seat; with two seats, the first mover's
advantage of `tournaments.ratings.fit_bradley_terry`.

`fit_plackett_luce` returns what `fit_bradley_terry` returns (a `tournaments.ratings.Fit`:
Elo-scale ratings with sandwich or bootstrap intervals, profile-likelihood ends for
unbounded records, rank ranges, seat terms), fitted by the same code
(`tournaments.ratings.fit_ratings`) over the `PlackettLuce` likelihood; a unit of the
sandwich and the bootstrap is one game. `strength_fit` is the quick fit the adaptive table
format needs.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import product

import networkx as nx
import numpy as np
from scipy import sparse

from tournaments.ratings import (
    ELO_SCALE,
    Fit,
    FitOptions,
    SeatAdvantage,
    fit_model,
    fit_ratings,
    seat_intervals,
)
from tournaments.rounds import Finish


@dataclass
class Unit:
    """One game in the likelihood: its sides' design rows and weighted strict orders."""

    rows: list[dict[int, float]]  # per side: parameter column -> coefficient
    orders: list[tuple[int, ...]]  # orders of the sides, best first (tie-breaks)
    weight: float  # of each order: 1 / len(orders)


def tie_breaks(results: Sequence[float]) -> list[tuple[int, ...]]:
    """The orders of the sides that a game with these results counts (see the module doc)."""
    levels = sorted(set(results), reverse=True)
    groups = [[i for i, r in enumerate(results) if r == v] for v in levels]
    per_group = []
    for g in groups:
        turns = [tuple(g[k:] + g[:k]) for k in range(len(g))]
        per_group.append(list(dict.fromkeys(turns + [t[::-1] for t in turns])))
    return [tuple(i for part in combo for i in part) for combo in product(*per_group)]


class PlackettLuce:
    """The penalised Plackett-Luce negative log-likelihood of `units`, in the interface of
    `tournaments.ratings.Logistic` (the models `fit_ratings` fits)."""

    def __init__(self, units: list[Unit], width: int, l2: float):
        self.unit_list, self.width, self.l2, self.units = units, width, l2, len(units)
        rows, cols, vals, owner, orders, weights = [], [], [], [], [], []
        side = 0
        for u, unit in enumerate(units):
            for row in unit.rows:
                rows += [side] * len(row)
                cols += list(row)
                vals += list(row.values())
                owner.append(u)
                side += 1
            base = side - len(unit.rows)
            orders += [[base + k for k in order] for order in unit.orders]
            weights += [unit.weight] * len(unit.orders)
        self.C = sparse.csr_matrix((vals, (rows, cols)), shape=(side, width))
        self.owner = sparse.csr_matrix(
            (np.ones(side), (owner, np.arange(side))), shape=(len(units), side)
        )
        m = max((len(o) for o in orders), default=1)
        self.order = np.full((len(orders), m), -1)
        for r, o in enumerate(orders):
            self.order[r, : len(o)] = o
        self.weight = np.array(weights, dtype=float)
        length = (self.order >= 0).sum(axis=1)
        self.stage = (
            np.arange(m)[None, :] < (length - 1)[:, None]
        )  # (orders, places): a choice is made

    def _stages(self, x: np.ndarray):
        """(log-likelihood per order, P[r, k, j] = chance side j wins stage k of order r)."""
        u = self.C @ x
        U = np.where(self.order >= 0, u[np.maximum(self.order, 0)], -np.inf)
        lse = np.logaddexp.accumulate(U[:, ::-1], axis=1)[:, ::-1]
        ll = np.where(self.stage, U - np.where(self.stage, lse, 0.0), 0.0).sum(axis=1)
        m = U.shape[1]
        later = np.triu(np.ones((m, m), dtype=bool))  # [k, j]: j >= k
        with np.errstate(invalid="ignore"):
            P = np.exp(U[:, None, :] - lse[:, :, None])
        P = np.where(later[None] & self.stage[:, :, None] & (self.order >= 0)[:, None, :], P, 0.0)
        return ll, P

    def _side_gradient(self, P: np.ndarray) -> np.ndarray:
        """d(weighted log-likelihood)/d(u of each side)."""
        g = (self.stage - P.sum(axis=1)) * self.weight[:, None]
        valid = self.order >= 0
        return np.bincount(self.order[valid], weights=g[valid], minlength=self.C.shape[0])

    def nll(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        ll, P = self._stages(x)
        f = -self.weight @ ll + 0.5 * self.l2 * x @ x
        return f, -(self.C.T @ self._side_gradient(P)) + self.l2 * x

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """C^T (diag(a) - Q^T W Q) C + l2 I, Q the stages' win chances over the sides."""
        _, P = self._stages(x)
        r, k, j = np.nonzero(P)
        stage = r * P.shape[1] + k
        Q = sparse.csr_matrix(
            (P[r, k, j], (stage, self.order[r, j])),
            shape=(P.shape[0] * P.shape[1], self.C.shape[0]),
        )
        W = sparse.diags(np.repeat(self.weight, P.shape[1]))
        inner = sparse.diags(np.asarray(Q.T @ W @ np.ones(Q.shape[0])).ravel()) - Q.T @ W @ Q
        return np.asarray((self.C.T @ inner @ self.C).todense()) + self.l2 * np.eye(self.width)

    def scores(self, x: np.ndarray) -> np.ndarray:
        g = self._side_gradient(self._stages(x)[1])
        return np.asarray((self.owner @ sparse.diags(g) @ self.C).todense())

    def resample(self, pick: np.ndarray) -> PlackettLuce:
        return PlackettLuce([self.unit_list[i] for i in pick], self.width, self.l2)


def _design(finishes: Sequence[Finish], index: dict, seat: bool) -> tuple[list[Unit], list]:
    """The games as `Unit`s, and the seat-term keys (label, seat) in column order."""
    n, keys, units = len(index), {}, []
    for f in finishes:
        rows = []
        for side in f.sides():
            row: dict[int, float] = {}
            for s in side:
                row[index[f.seats[s]]] = row.get(index[f.seats[s]], 0.0) + 1.0
                if seat and s < len(f.seats) - 1:
                    c = keys.setdefault((f.label, s), n + len(keys))
                    row[c] = row.get(c, 0.0) + 1.0
            rows.append(row)
        orders = tie_breaks(f.side_results())
        units.append(Unit(rows, orders, 1.0 / len(orders)))
    return units, list(keys)


def _took_points(finishes: Sequence[Finish], index: dict) -> nx.DiGraph:
    """An edge a -> b when a's side finished above or level with b's in some game."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(index)))
    for f in finishes:
        sides, results = f.sides(), f.side_results()
        for (si, ri), (sj, rj) in product(zip(sides, results), repeat=2):
            if si != sj and ri >= rj:
                graph.add_edges_from((index[f.seats[a]], index[f.seats[b]]) for a in si for b in sj)
    return graph


def fit_plackett_luce(
    finishes: Sequence[Finish],
    players: Sequence[Hashable] | None = None,
    reference: Hashable | None = None,
    ci: str | None = "sandwich",
    level: float = 0.95,
    bootstrap: int = 200,
    seed: int = 0,
    l2: float = 0.01,
    seat: bool = False,
    ranks: bool = True,
) -> Fit:
    """Fit Plackett-Luce to finishing orders; ratings on the Elo scale, as
    `tournaments.ratings.fit_bradley_terry` gives them (see there for the intervals, the
    rank ranges, `reference`, `l2` and the other arguments).

    Args:
      finishes: one `Finish` per game (seats, scores, teams, label).
      seat: fit one term per game label and seat but the last (the module doc); `Fit.seat`
        keys them by the label for a two-seat game, else by "LABEL seat S".
    """
    finishes = list(finishes)
    if players is None:
        players = list(dict.fromkeys(p for f in finishes for p in f.seats))
    index = {p: i for i, p in enumerate(players)}
    stray = [p for f in finishes for p in f.seats if p not in index]
    if stray:
        raise ValueError(f"a game names {stray[0]!r}, who is not in the rated list")
    if reference is not None and reference not in index:
        raise ValueError(f"reference player {reference!r} is not among the rated players")
    if ci not in ("sandwich", "bootstrap", None):
        raise ValueError(f"ci must be 'sandwich', 'bootstrap' or None, got {ci!r}")
    units, keys = _design(finishes, index, seat)
    n = len(players)
    model = PlackettLuce(units, n + len(keys), l2)
    played = np.bincount([index[p] for f in finishes for p in set(f.seats)], minlength=n)
    ref = None if reference is None else index[reference]
    options = FitOptions(ci, level, bootstrap, seed, ranks)
    ratings, x, cov = fit_ratings(
        model, players, _took_points(finishes, index), played, ref, options
    )
    seats = _seat_terms(finishes, keys, x, n)
    if cov is not None:
        seat_intervals(seats, list(seats), *cov, n, level)
    return Fit(ratings, seats)


def _seat_terms(finishes: Sequence[Finish], keys: list, x: np.ndarray, n: int) -> dict:
    """{key: SeatAdvantage} of the fitted seat terms (no interval yet), in column order."""
    width = {f.label: len(f.seats) for f in finishes}
    counts = {label: sum(f.label == label for f in finishes) for label in width}
    return {
        (label if width[label] == 2 else f"{label} seat {s}"): SeatAdvantage(
            float(ELO_SCALE * x[n + k]), float("nan"), float("nan"), counts[label]
        )
        for k, (label, s) in enumerate(keys)
    }


def strength_fit(
    finishes: Sequence[Finish], players: Sequence[Hashable], l2: float
) -> tuple[np.ndarray, np.ndarray]:
    """Penalised maximum-likelihood log-strengths of `players` (no seat terms) and their
    model-based covariance H^-1."""
    index = {p: i for i, p in enumerate(players)}
    model = PlackettLuce(_design(finishes, index, False)[0], len(players), l2)
    theta = fit_model(model)
    return theta, np.linalg.inv(model.hessian(theta))
