"""Social-dilemma and negotiation metrics, read from the replayed matches.

Each match is replayed in its env (same seed, same actions) and the game says what
cooperating means (`cooperation_history`, as the scripted social bots read it:
Cooperate / Stag / Swerve / the whole endowment / an honest claim in Trust-and-Split / at
most the sustainable share in commons).
Per (evaluated agent, game, opponent):

    cooperation      share of the agent's rounds in which it cooperated
    cooperation_ci   95% t interval with the match as the unit (a match's rounds are not
                     independent draws): the ratio estimator's (`evaluation.stats.ratio_ci`),
                     so with a random horizon it is centred on the round-weighted rate above
    reciprocity      P(cooperate | the others all cooperated last round) minus
                     P(cooperate | another defected last round), over rounds 2.. (None
                     unless both happened): tit-for-tat 1, an unconditional policy 0
    mutual           share of rounds in which every player cooperated
    sucker           share of rounds the agent cooperated while another player defected
                     (against always_defect: how much it lets itself be exploited)
    return_gap       mean over matches of (the others' mean return - the agent's return)
    contribution     the agent's mean share of the endowment put in per round (public_goods;
                     None in the two-move dilemmas, where it is `cooperation`)
    welfare          all players' summed returns as a share of the social optimum (the
                     best joint payoff of a round, every round; public_goods: everyone puts
                     in the whole endowment when the multiplier exceeds 1, n x endowment x
                     multiplier; Trust-and-Split: the winning hand claims every coin;
                     commons: the sustainable optimum of the whole horizon, whenever the
                     stock collapsed, `games.commons.sustainable_optimum`)
    agent_share      the agent's share of the summed returns
    fairness         Jain's index of the players' returns, mean over matches (1 = equal)
    gini             the Gini index of the players' returns, mean over matches (0 = equal,
                     (n - 1) / n = one player has everything; `gini`)

The memory-1 profile (`Memory1Profile`) tells apart policies that reciprocity scores alike
(tit-for-tat and alternation both score near 1). A state is the last round's moves, the
agent's own first, then the other's (with more players: whether all the others cooperated):

    first            P(C) in round 1
    CC, CD, DC, DD   P(C | last round: I cooperated and the other cooperated), P(C | I
                     cooperated, the other defected), P(C | I defected, the other
                     cooperated), P(C | both defected): tit-for-tat (1, 0, 1, 0)
    method           "exact": each visit counts the agent's own probability of cooperating
                     there (`TurnRecord.action_probs`, which `arena eval` records for an agent
                     with `action_probabilities`, e.g. a constrained LLM on the transformers
                     backend), the CI a t interval over matches (a point for a policy that
                     sees only the last round); "counted": each visit counts 1 if it
                     cooperated, the CI Wilson's over the visits (exact for a memory-1
                     policy, whose moves in a state are independent draws)
    nearest          the named strategy of `NAMED` nearest to the profile, Euclidean
                     distance over the states the agent visited (`distance`, at most 2);
                     states it never visited do not count, so strategies that differ only
                     there tie and are all named ("tit_for_tat or grim_trigger")

An agent that met more than one opponent in a dilemma also has a row pooled over them
(opponent "all"): a policy's profile is best read there, where the opponents together visit
every state (against always_defect alone it only ever sees CD and DD).

Negotiation (`negotiation`, `simple_negotiation`):

    agreement        share of matches with at least one accepted trade
    pareto           share of matches whose final allocation is Pareto efficient (no
                     integer reallocation of the goods makes one player better off in its
                     own values and the other no worse; checked exhaustively)
    gains            the summed value gain as a share of the largest possible (every
                     unit with the player who values it more)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

import numpy as np

import games
from agents.social_bots import SOCIAL_GAMES
from core.records import MatchRecord, TurnRecord
from evaluation.stats import ratio_ci, wilson
from evaluation.suites import plan_key, unkey

DILEMMAS = SOCIAL_GAMES  # the games whose moves cooperate or not, as the social bots read them
NEGOTIATION = ("negotiation", "simple_negotiation")
ALL = "all"  # the opponent of a row pooled over a game's opponents
STATES = ("CC", "CD", "DC", "DD")  # the last round: own move first, then the other's

# Named memory-1 strategies: P(C) after CC, CD, DC, DD (own move first).
NAMED: dict[str, tuple[float, float, float, float]] = {
    "tit_for_tat": (1.0, 0.0, 1.0, 0.0),  # copy the other's last move
    # forgive a defection with probability 1/3: Nowak and Sigmund's generosity
    # min(1 - (T - R) / (R - S), (R - P) / (T - P)) at R=3, S=0, T=5, P=1
    "generous_tit_for_tat": (1.0, 1 / 3, 1.0, 1 / 3),
    "win_stay_lose_shift": (1.0, 0.0, 0.0, 1.0),  # repeat after R or T, switch after S or P
    # grim trigger as memory-1: cooperate only after mutual cooperation. From a cooperative
    # start it plays as grim does: once either defects, CC never comes back
    "grim_trigger": (1.0, 0.0, 0.0, 0.0),
    "always_defect": (0.0, 0.0, 0.0, 0.0),
    "always_cooperate": (1.0, 1.0, 1.0, 1.0),
    # cooperate only after defecting against a cooperator: with tit-for-tat it alternates
    # C, D, C, D ..., against a defector it defects
    "alternation": (0.0, 0.0, 1.0, 0.0),
}


@dataclass
class StateRate:
    """P(cooperate) in one state: the mean over the agent's visits, its 95% CI, the visits."""

    p: float | None  # None: never visited
    ci: tuple[float, float] | None
    n: int


@dataclass
class Memory1Profile:
    """An agent's P(cooperate) in round 1 and after each outcome of the last round."""

    method: str  # "exact" (from the agent's distributions) | "counted" (from its moves)
    first: StateRate
    CC: StateRate
    CD: StateRate
    DC: StateRate
    DD: StateRate

    def vector(self) -> dict[str, float | None]:
        """P(C) per state of `STATES` (None where never visited)."""
        return {s: getattr(self, s).p for s in STATES}


def nearest_strategy(vector: dict[str, float | None]) -> tuple[str | None, float | None]:
    """The `NAMED` strategy nearest to a profile and its Euclidean distance over the visited states.

    Args:
        vector: P(C) per state of `STATES`; None for a state never visited (left out).

    Returns:
        (name, distance): the names tied at the smallest distance joined by " or ", in
        `NAMED` order; (None, None) when no state was visited.
    """
    seen = [i for i, s in enumerate(STATES) if vector.get(s) is not None]
    if not seen:
        return None, None
    dist = {
        name: float(np.sqrt(sum((vector[STATES[i]] - ref[i]) ** 2 for i in seen)))
        for name, ref in NAMED.items()
    }
    best = min(dist.values())
    return " or ".join(n for n, d in dist.items() if d <= best + 1e-9), best


@dataclass
class SocialRow:
    agent: str
    game: str
    opponent: str
    matches: int
    rounds: int = 0
    cooperation: float | None = None
    cooperation_ci: tuple[float, float] | None = None
    reciprocity: float | None = None
    mutual: float | None = None
    sucker: float | None = None
    return_gap: float | None = None
    contribution: float | None = None
    welfare: float | None = None
    agent_share: float | None = None
    fairness: float | None = None
    gini: float | None = None
    agreement: float | None = None
    pareto: float | None = None
    gains: float | None = None
    profile: Memory1Profile | None = None
    nearest: str | None = None
    nearest_distance: float | None = None
    kind: str = "social"


PROFILE_FIELDS = ("profile", "nearest", "nearest_distance")  # the report prints them apart


def replay(rec: MatchRecord, before_turn: Callable[[object, TurnRecord], None] | None = None):
    """The match's env after replaying its recorded actions from its seed; `before_turn(env,
    turn)`, when given, sees the env just before each recorded turn is played."""
    env = games.make(rec.game, **rec.params)
    env.reset(seed=rec.seed)
    for t in rec.turns:
        while env.agents and (
            env.terminations[env.agent_selection] or env.truncations[env.agent_selection]
        ):
            env.step(None)
        if env.agent_selection != t.player:
            raise RuntimeError(
                f"match {rec.match_id} does not replay: turn {t.index} is {t.player}'s, the env waits for {env.agent_selection}"
            )
        if before_turn is not None:
            before_turn(env, t)
        if t.action is None:
            env.forfeit(t.player)
            break
        env.step(t.action)
    return env


def social_optimum_per_round(env) -> float:
    """The largest summed payoff of one round."""
    if hasattr(env, "high_value"):  # Trust-and-Split: the winning hand claims every coin
        return env.coins * env.high_value
    if hasattr(env, "multiplier"):  # public goods: n e + (m - 1) x the pot, the pot at most n e
        return env.num_players * env.endowment * max(env.multiplier, 1.0)
    n, m = len(env.possible_agents), env.num_moves
    if m**n > 200_000:
        raise ValueError(f"{env.metadata['name']}: too many joint moves to find the social optimum")
    return max(sum(env.payoffs(joint)) for joint in product(range(m), repeat=n))


def jain(returns: list[float]) -> float:
    x = np.asarray(returns, dtype=float)
    if np.all(x == 0):
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def gini(returns: list[float]) -> float:
    """The Gini index of `returns`: the mean absolute difference over all ordered pairs divided by
    twice the mean, sum_ij |x_i - x_j| / (2 n^2 mean); 0 when all are equal (or all 0). Returns
    below 0 are shifted up to 0 first (the index is defined for non-negative shares)."""
    x = np.asarray(returns, dtype=float)
    x = x - min(0.0, float(x.min()))
    if np.all(x == 0):
        return 0.0
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * len(x) ** 2 * x.mean()))


def cooperation_share(rec: MatchRecord, seat: str) -> tuple[float, int] | None:
    """A player's cooperation in a repeated dilemma match: (summed per-round share, rounds); the
    share is its contribution over the endowment in public_goods, 1 or 0 (cooperated or not) in
    the two-move dilemmas; None for a game without cooperation (`cooperation_history`)."""
    if rec.game not in DILEMMAS:
        return None
    env = replay(rec)
    history = env.cooperation_history(seat)
    if hasattr(env, "endowment"):
        put = [t.action for t in rec.turns if t.player == seat and t.action is not None]
        return sum(float(c) / env.endowment for c in put[: len(history)]), len(history)
    return float(sum(mine for mine, _ in history)), len(history)


def pareto_efficient(inventory: np.ndarray, values: np.ndarray) -> bool:
    """Is the two-player allocation `inventory` (2, R) Pareto efficient under `values` (2, R)?"""
    total = inventory.sum(axis=0)
    if np.prod(total + 1) > 2_000_000:
        raise ValueError("too many allocations to check Pareto efficiency")
    grid = np.array(list(product(*[range(int(t) + 1) for t in total])))  # (K, R) player 0's bundle
    u0, u1 = grid @ values[0], (total - grid) @ values[1]
    now0, now1 = inventory[0] @ values[0], inventory[1] @ values[1]
    better = (u0 >= now0 - 1e-9) & (u1 >= now1 - 1e-9) & ((u0 > now0 + 1e-9) | (u1 > now1 + 1e-9))
    return not bool(better.any())


def social_rows(records: list[MatchRecord], who: str) -> list[SocialRow]:
    """The social rows of an evaluated agent.

    Args:
        records: evaluation matches (`evaluation.suites` match ids); other games are skipped.
        who: the evaluated agent's name in the matches' seats.

    Returns:
        One row per (game, opponent) of the dilemma and negotiation games `who` played, and on
        a dilemma with more than one opponent a row pooled over them (opponent "all") after them.
    """
    groups: dict[tuple[str, str], list[MatchRecord]] = defaultdict(list)
    for rec in records:
        if rec.game in DILEMMAS + NEGOTIATION and who in rec.seats.values():
            game, opponent, _ = plan_key(rec.match_id)
            groups[(game, opponent)].append(rec)
    rows = []
    games_ = sorted({game for game, _ in groups})
    for game in games_:
        name = unkey(game)
        mine = {o: recs for (g, o), recs in sorted(groups.items()) if g == game}
        for opponent, recs in mine.items():
            row = SocialRow(who, name, unkey(opponent), len(recs))
            if name in NEGOTIATION:
                _negotiation(row, recs, who)
            else:
                dilemma_metrics(row, recs, who)
            rows.append(row)
        if name not in NEGOTIATION and len(mine) > 1:
            recs = [r for rs in mine.values() for r in rs]
            row = SocialRow(who, name, ALL, len(recs))
            dilemma_metrics(row, recs, who)
            rows.append(row)
    return rows


def dilemma_metrics(row: SocialRow, recs: list[MatchRecord], who: str) -> None:
    """Fill `row` with `who`'s dilemma metrics and memory-1 profile over `recs` (module doc)."""
    coop = mutual = sucker = rounds = 0
    gaps, shares, fair, ginis, per_match, total, optimum = [], [], [], [], [], 0.0, 0.0
    contributed = 0.0
    best: dict[str, float] = {}
    after = {
        True: [0, 0],
        False: [0, 0],
    }  # the others all cooperated last round -> [my cooperations, rounds]
    replayed = []
    for rec in recs:
        env = replay(rec)
        seat = next(p for p, a in rec.seats.items() if a == who)
        replayed.append((rec, env, seat))
        history = env.cooperation_history(seat)
        rounds += len(history)
        if history:
            per_match.append((sum(mine for mine, _ in history), len(history)))
        for (_, before), (mine, _) in zip(history, history[1:]):
            after[all(before)][0] += mine
            after[all(before)][1] += 1
        for mine, others in history:
            coop += mine
            mutual += mine and all(others)
            sucker += mine and not all(others)
        returns = [rec.returns[p] for p in env.possible_agents]
        mine_r = rec.returns[seat]
        gaps.append((sum(returns) - mine_r) / (len(returns) - 1) - mine_r)
        shares.append(mine_r)
        fair.append(jain(returns))
        ginis.append(gini(returns))
        contributed += cooperation_share(rec, seat)[0] if hasattr(env, "endowment") else 0.0
        total += sum(returns)
        if hasattr(env, "sustainable_optimum"):  # commons: the horizon's optimum
            optimum += env.sustainable_optimum()
        else:
            if rec.game not in best:
                best[rec.game] = social_optimum_per_round(env)
            optimum += best[rec.game] * len(history)
    row.rounds = rounds
    row.cooperation, row.mutual, row.sucker = (
        coop / max(rounds, 1),
        mutual / max(rounds, 1),
        sucker / max(rounds, 1),
    )
    if (
        per_match
    ):  # a rate over matches of (possibly) unequal length: the ratio's t interval clipped to [0, 1]
        lo, hi = ratio_ci(*zip(*per_match))[1:]
        row.cooperation_ci = (max(0.0, lo), min(1.0, hi))
    if after[True][1] and after[False][1]:
        row.reciprocity = after[True][0] / after[True][1] - after[False][0] / after[False][1]
    row.return_gap = float(np.mean(gaps))
    row.welfare = total / optimum if optimum else None
    row.agent_share = sum(shares) / total if total else None
    row.fairness = float(np.mean(fair))
    row.gini = float(np.mean(ginis))
    if replayed and hasattr(replayed[0][1], "endowment"):
        row.contribution = contributed / max(rounds, 1)
    if rounds:
        row.profile = _profile(replayed)
        row.nearest, row.nearest_distance = nearest_strategy(row.profile.vector())


def cooperation_probabilities(rec: MatchRecord, env, seat: str) -> list[float] | None:
    """A player's exact probability of cooperating in each round of a repeated dilemma.

    Args:
        rec: the match, its turns carrying `action_probs`.
        env: the match's env, replayed (`replay`): it says which actions cooperate.
        seat: the player ("player_0", ...).

    Returns:
        P(cooperate) per round, from the player's turns' `action_probs`; None when the game
        has no per-move cooperation (`is_cooperative`) or a turn lacks its distribution.
    """
    if not hasattr(env, "is_cooperative"):
        return None
    turns = [t for t in rec.turns if t.player == seat]  # one decision per round
    if not turns or any(not t.action_probs for t in turns):
        return None
    return [
        float(sum(p for a, p in t.action_probs if env.is_cooperative(a)))
        / float(sum(p for _, p in t.action_probs))
        for t in turns
    ]


def memory1_profile(recs: list[MatchRecord], who: str) -> Memory1Profile:
    """`who`'s memory-1 profile over its rounds in `recs` (see the module doc): exact when every
    match carries its distributions (`cooperation_probabilities`), else counted from its moves.

    Args:
        recs: matches of a dilemma game that `who` played.
        who: the agent's name in the matches' seats.

    Returns:
        P(C) in round 1 and in each state of `STATES`, with CIs and visits.
    """
    matches = []
    for rec in recs:
        seat = next(p for p, a in rec.seats.items() if a == who)
        matches.append((rec, replay(rec), seat))
    return _profile(matches)


def _profile(matches: list[tuple[MatchRecord, object, str]]) -> Memory1Profile:
    """`memory1_profile` of (record, replayed env, seat) triples."""
    visits: dict[str, list[tuple[float, int]]] = {s: [] for s in ("first", *STATES)}
    per_match = [
        (env.cooperation_history(seat), cooperation_probabilities(rec, env, seat))
        for rec, env, seat in matches
    ]
    exact = all(probs is not None and len(probs) >= len(h) for h, probs in per_match)
    for history, probs in per_match:
        values = probs if exact else [float(mine) for mine, _ in history]
        match: dict[str, list[float]] = defaultdict(list)
        for k, (value, _) in enumerate(zip(values, history)):
            if k == 0:
                state = "first"
            else:
                mine, others = history[k - 1]
                state = ("C" if mine else "D") + ("C" if all(others) else "D")
            match[state].append(value)
        for state, v in match.items():
            visits[state].append((sum(v), len(v)))
    rates = {s: _state_rate(v, exact) for s, v in visits.items()}
    return Memory1Profile("exact" if exact else "counted", **rates)


def _state_rate(per_match: list[tuple[float, int]], exact: bool) -> StateRate:
    """One state's rate from (sum of P(C) or cooperations, visits) per match that visited it."""
    n = sum(k for _, k in per_match)
    if n == 0:
        return StateRate(None, None, 0)
    total = sum(c for c, _ in per_match)
    if exact:
        rate, lo, hi = ratio_ci([c for c, _ in per_match], [k for _, k in per_match])
        return StateRate(rate, (max(0.0, lo), min(1.0, hi)), n)
    return StateRate(total / n, wilson(round(total), n), n)


def _negotiation(row: SocialRow, recs: list[MatchRecord], who: str) -> None:
    agreed, pareto, gained, possible, fair = 0, 0, 0.0, 0.0, []
    for rec in recs:
        env = replay(rec)
        agreed += any(e.kind == "accept" for e in env.events)
        pareto += pareto_efficient(env.inventory, env.values)
        total = env.inventory.sum(axis=0)
        start = float(env.start_value.sum())
        gained += sum(env.value_of(p) for p in (0, 1)) - start
        possible += float(total @ env.values.max(axis=0)) - start
        fair.append(jain([env.value_of(p) for p in (0, 1)]))
    row.agreement, row.pareto = agreed / len(recs), pareto / len(recs)
    row.gains = gained / possible if possible > 0 else 1.0
    row.fairness = float(np.mean(fair))
