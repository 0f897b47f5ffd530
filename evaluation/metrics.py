"""From match records to evaluation rows: one `Cell` per (agent, game, opponent, seat) and
pooled over seats, and one `Paired` per cell and game for agent minus baseline.

A match's points are 1 for a win, 0.5 for a draw, 0 for a loss (the non-losing rate
counts draws as successes, the win rate does not).

Ranked games: a win/draw/loss reading means something in two-player competitive games
only (`win_loss_game`). In a game of more than two players, and in any game that is not
competitive (the social dilemmas, negotiation, cooperative games), a cell has no points
and no non-losing rate (None); it has instead the agent's finishing rank (1 = the highest
return; tied players share the mean of their places, so a seat of an n-player game where
all do alike ranks (n + 1) / 2) with a t interval, and on the repeated dilemmas its
cooperation (`evaluation.social.cooperation_share`: the share of the endowment it put in,
in public_goods). Its win rate is the share of matches it finished first alone (a shared
first place is not a win). An agent's invalid-move rate is the
share of its turns whose first reply did not parse (a retry or the fallback was needed);
its forfeit rate the share of matches it lost by forfeit (`fallback="forfeit"`).

Paired differences (`paired`) are taken match by match in each of `MEASURES`: points,
non-losing, win, return and the match's legal-move rate (its share of the side's moves
that parsed first time; a match where one side made no move has none and is left out of
that measure's pairs); in a ranked game the rank (`RANK_MEASURES`) instead of points and
non-losing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

import games
from core.records import MatchRecord
from evaluation.social import cooperation_share
from evaluation.stats import mean_ci, paired_bootstrap, wilson
from evaluation.suites import plan_key, unkey

POINTS = {"win": 1.0, "draw": 0.5, "loss": 0.0}
ALL = "all"  # the seat of a pooled cell


@dataclass
class Cell:
    """An evaluated agent's results in one (game, opponent, seat), or pooled over seats."""

    agent: str  # "agent" | "baseline"
    game: str
    opponent: str
    seat: str  # "player_0", ... or "all"
    matches: int
    wins: int  # ranked games: first alone
    draws: int  # ranked games: first shared
    losses: int
    win_rate: float
    win_ci: tuple[float, float]
    non_losing: float | None  # None in a ranked game
    non_losing_ci: tuple[float, float] | None
    mean_return: float
    return_ci: tuple[float, float]
    moves: int  # the agent's own decisions
    invalid_rate: float
    forfeit_rate: float
    tokens_per_move: float
    rank: float | None = None  # ranked games: mean finishing rank (1 = first)
    rank_ci: tuple[float, float] | None = None  # its t interval
    cooperation: float | None = None  # repeated dilemmas: cooperation (contribution) share
    kind: str = "cell"


@dataclass
class Difference:
    """Agent minus baseline in one measure over paired matches."""

    baseline: float  # the baseline's mean over the pairs (nan: no pair has the measure)
    agent: float
    diff: float
    ci: tuple[float, float]  # paired bootstrap 95%
    verdict: str  # better / worse / no detectable difference


@dataclass
class Paired:
    """Agent minus baseline over the same matches, in every measure of `MEASURES`."""

    game: str
    opponent: str  # "all" when pooled over the game
    seat: str
    pairs: int
    points: Difference | None  # None in a ranked game
    non_losing: Difference | None  # None in a ranked game
    win_rate: Difference
    mean_return: Difference
    legal_move_rate: Difference
    rank: Difference | None = None  # ranked games only; lower is better
    kind: str = "paired"


@dataclass
class _Result:
    """One match from one evaluated agent's side."""

    key: tuple[str, str, int]  # (game key, opponent, match number)
    seat: str
    outcome: str
    ret: float
    moves: int
    invalid: int
    tokens: int
    forfeit: bool
    ranked: bool = False  # the game is scored by rank (`win_loss_game` is False)
    seats: int = 2
    rank: float = math.nan
    cooperation: tuple[float, int] | None = None  # (cooperative share summed over rounds, rounds)


def win_loss_game(game: str, seats: int) -> bool:
    """Whether win/draw/loss (points, the non-losing rate) means something in `game` with `seats`
    players: two-player competitive (zero- or constant-sum) games only; the others are ranked."""
    return seats == 2 and games.info(game).kind == "competitive"


def finishing_rank(returns: dict[str, float], seat: str) -> float:
    """`seat`'s place by return (1 = highest), tied seats sharing the mean of their places."""
    from scipy.stats import rankdata  # start-up time: scipy

    seats = list(returns)
    return float(rankdata([-float(returns[p]) for p in seats], method="average")[seats.index(seat)])


def results(records: list[MatchRecord], who: str) -> list[_Result]:
    """`who`'s side of every record it plays in."""
    out, ranked = [], {}
    for rec in records:
        seat = next((p for p, a in rec.seats.items() if a == who), None)
        if seat is None:
            continue
        if rec.game not in ranked:
            ranked[rec.game] = not win_loss_game(rec.game, len(rec.seats))
        mine = [t for t in rec.turns if t.agent == who]
        out.append(
            _Result(
                key=plan_key(rec.match_id),
                seat=seat,
                outcome=rec.outcome.get(seat, "draw"),
                ret=float(rec.returns.get(seat, 0.0)),
                moves=len(mine),
                invalid=sum((not t.valid) or t.retries > 0 for t in mine),
                tokens=sum(
                    sum(len(a.token_ids) for a in t.attempts) or len(t.token_ids) for t in mine
                ),
                forfeit=any(t.fallback == "forfeit" for t in mine),
                ranked=ranked[rec.game],
                seats=len(rec.seats),
                rank=finishing_rank(rec.returns, seat) if ranked[rec.game] else math.nan,
                cooperation=cooperation_share(rec, seat) if ranked[rec.game] else None,
            )
        )
    return out


def cell(who: str, game: str, opponent: str, seat: str, rs: list[_Result]) -> Cell:
    n = len(rs)
    wins = sum(r.outcome == "win" for r in rs)
    draws = sum(r.outcome == "draw" for r in rs)
    moves = sum(r.moves for r in rs)
    m, lo, hi = mean_ci([r.ret for r in rs])
    ranked = bool(rs) and rs[0].ranked
    extra = {}
    if ranked:
        rank, rank_lo, rank_hi = mean_ci([r.rank for r in rs])
        rank_lo, rank_hi = max(1.0, rank_lo), min(float(rs[0].seats), rank_hi)  # ranks 1..n
        shares = [r.cooperation for r in rs if r.cooperation is not None]
        extra = {
            "rank": rank,
            "rank_ci": (rank_lo, rank_hi),
            "cooperation": sum(c for c, _ in shares) / max(sum(k for _, k in shares), 1)
            if shares
            else None,
        }
    return Cell(
        agent=who,
        game=game,
        opponent=opponent,
        seat=seat,
        matches=n,
        wins=wins,
        draws=draws,
        losses=n - wins - draws,
        win_rate=wins / max(n, 1),
        win_ci=wilson(wins, n),
        non_losing=None if ranked else (wins + draws) / max(n, 1),
        non_losing_ci=None if ranked else wilson(wins + draws, n),
        mean_return=m,
        return_ci=(lo, hi),
        moves=moves,
        invalid_rate=sum(r.invalid for r in rs) / max(moves, 1),
        forfeit_rate=sum(r.forfeit for r in rs) / max(n, 1),
        tokens_per_move=sum(r.tokens for r in rs) / max(moves, 1),
        **extra,
    )


def cells(records: list[MatchRecord], who: str) -> list[Cell]:
    """Per (game, opponent, seat) and pooled over seats ("all"), in suite order."""
    groups: dict[tuple[str, str], list[_Result]] = defaultdict(list)
    for r in sorted(results(records, who), key=lambda r: r.key):
        groups[r.key[:2]].append(r)
    out = []
    for (game, opponent), rs in groups.items():
        for seat in sorted({r.seat for r in rs}):
            out.append(
                cell(who, unkey(game), unkey(opponent), seat, [r for r in rs if r.seat == seat])
            )
        out.append(cell(who, unkey(game), unkey(opponent), ALL, rs))
    return out


MEASURES = {  # Paired's fields: one number per match and side; nan leaves the pair out
    "points": lambda r: POINTS[r.outcome],
    "non_losing": lambda r: float(r.outcome != "loss"),
    "win_rate": lambda r: float(r.outcome == "win"),
    "mean_return": lambda r: r.ret,
    "legal_move_rate": lambda r: 1.0 - r.invalid / r.moves if r.moves else math.nan,
}
RANK_MEASURES = {"rank": lambda r: r.rank}  # ranked games only (lower is better)
WIN_LOSS = ("points", "non_losing")  # measures of two-player competitive games only
RANKED = tuple(RANK_MEASURES)


def paired(
    records: list[MatchRecord], agent: str = "agent", baseline: str = "baseline", seed: int = 0
) -> list[Paired]:
    """Agent minus baseline, per (game, opponent, seat), pooled over the seats, and pooled per game
    (opponent and seat "all"); the bootstrap is stratified by seat, and by opponent when pooled."""
    base = {r.key: r for r in results(records, baseline)}
    pairs = [
        (a, base[a.key])
        for a in sorted(results(records, agent), key=lambda r: r.key)
        if a.key in base
    ]
    by_game: dict[str, list] = defaultdict(list)
    for a, b in pairs:
        by_game[a.key[0]].append((a, b))
    out = []
    for game, ps in by_game.items():
        for opponent in dict.fromkeys(a.key[1] for a, _ in ps):
            mine = [(a, b) for a, b in ps if a.key[1] == opponent]
            for seat in [*sorted({a.seat for a, _ in mine}), ALL]:
                sel = [(a, b) for a, b in mine if seat in (ALL, a.seat)]
                out.append(_paired(game, opponent, seat, sel, [a.seat for a, _ in sel], seed))
        out.append(_paired(game, ALL, ALL, ps, [(a.key[1], a.seat) for a, _ in ps], seed))
    return out


def _paired(game: str, opponent: str, seat: str, ps: list, strata: list, seed: int) -> Paired:
    out: dict[str, Difference | None] = {}
    ranked = bool(ps) and ps[0][0].ranked
    for name, f in {**MEASURES, **RANK_MEASURES}.items():
        if name in (WIN_LOSS if ranked else RANKED):
            out[name] = None
            continue
        kept = [
            (a, b, s) for (a, b), s in zip(ps, strata) if not (math.isnan(f(a)) or math.isnan(f(b)))
        ]
        sign = -1.0 if name in RANKED else 1.0  # a verdict of "better" for a lower rank
        d = paired_bootstrap(
            [sign * (f(a) - f(b)) for a, b, _ in kept], [s for *_, s in kept], seed=seed
        )
        base = float(np.mean([f(b) for _, b, _ in kept])) if kept else math.nan
        agent = float(np.mean([f(a) for a, _, _ in kept])) if kept else math.nan
        ci = (d.low, d.high) if sign > 0 else (-d.high, -d.low)
        out[name] = Difference(base, agent, sign * d.mean + 0.0, ci, d.verdict)
    return Paired(unkey(game), unkey(opponent) if opponent != ALL else ALL, seat, len(ps), **out)


def summary(cells_: list[Cell]) -> list[dict]:
    """One flat row per (game, opponent): the pooled cell, with the non-losing rate per seat
    (what a training run logs at each evaluation point; `cells` order: seats, then pooled).
    A ranked game's row has None for the non-losing rate and its CI, and its mean rank (`rank`,
    `rank_ci`) and cooperation (None outside the repeated dilemmas) instead."""
    out, seats = [], {}
    for c in cells_:
        if c.seat != ALL:
            seats[c.seat] = c.non_losing
            continue
        out.append(
            {
                "game": c.game,
                "opponent": c.opponent,
                "games": c.matches,
                "wins": c.wins,
                "draws": c.draws,
                "losses": c.losses,
                "win_rate": c.win_rate,
                "non_losing": c.non_losing,
                "ci_low": None if c.non_losing_ci is None else c.non_losing_ci[0],
                "ci_high": None if c.non_losing_ci is None else c.non_losing_ci[1],
                "non_losing_by_seat": seats,
                "mean_return": c.mean_return,
                "return_ci": list(c.return_ci),
                "invalid_rate": c.invalid_rate,
                "forfeit_rate": c.forfeit_rate,
                "tokens_per_move": c.tokens_per_move,
                **(
                    {"rank": c.rank, "rank_ci": list(c.rank_ci), "cooperation": c.cooperation}
                    if c.rank_ci is not None
                    else {}
                ),
            }
        )
        seats = {}
    return out
