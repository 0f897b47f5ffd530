"""Social-dilemma and negotiation metrics, read from the replayed matches.

Each match is replayed in its env (same seed, same actions) and the game says what
cooperating means (`cooperation_history`, as the scripted social bots read it:
Cooperate / Stag / Swerve / the whole endowment / an honest claim in Trust-and-Split).
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
    welfare          all players' summed returns as a share of the social optimum (the
                     best joint payoff of a round, every round; Trust-and-Split: the
                     winning hand claims every coin)
    agent_share      the agent's share of the summed returns
    fairness         Jain's index of the players' returns, mean over matches (1 = equal)

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
from dataclasses import dataclass
from itertools import product

import numpy as np

import games
from core.records import MatchRecord
from evaluation.stats import ratio_ci
from evaluation.suites import plan_key, unkey

DILEMMAS = ("prisoners_dilemma", "stag_hunt", "chicken", "public_goods", "trust_and_split")
NEGOTIATION = ("negotiation", "simple_negotiation")


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
    welfare: float | None = None
    agent_share: float | None = None
    fairness: float | None = None
    agreement: float | None = None
    pareto: float | None = None
    gains: float | None = None
    kind: str = "social"


def replay(rec: MatchRecord):
    """The match's env after replaying its recorded actions from its seed."""
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
        if t.action is None:
            env.forfeit(t.player)
            break
        env.step(t.action)
    return env


def social_optimum_per_round(env) -> float:
    """The largest summed payoff of one round."""
    if hasattr(env, "high_value"):  # Trust-and-Split: the winning hand claims every coin
        return env.coins * env.high_value
    n, m = len(env.possible_agents), env.num_moves
    if m**n > 200_000:
        raise ValueError(f"{env.metadata['name']}: too many joint moves to find the social optimum")
    return max(sum(env.payoffs(joint)) for joint in product(range(m), repeat=n))


def jain(returns: list[float]) -> float:
    x = np.asarray(returns, dtype=float)
    if np.all(x == 0):
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


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
    """One row per (game, opponent) of the dilemma and negotiation games `who` played."""
    groups: dict[tuple[str, str], list[MatchRecord]] = defaultdict(list)
    for rec in records:
        if rec.game in DILEMMAS + NEGOTIATION and who in rec.seats.values():
            game, opponent, _ = plan_key(rec.match_id)
            groups[(game, opponent)].append(rec)
    rows = []
    for (game, opponent), recs in sorted(groups.items()):
        name = unkey(game)
        row = SocialRow(who, name, unkey(opponent), len(recs))
        if name in NEGOTIATION:
            _negotiation(row, recs, who)
        else:
            dilemma_metrics(row, recs, who)
        rows.append(row)
    return rows


def dilemma_metrics(row: SocialRow, recs: list[MatchRecord], who: str) -> None:
    coop = mutual = sucker = rounds = 0
    gaps, shares, fair, per_match, total, optimum = [], [], [], [], 0.0, 0.0
    best: dict[str, float] = {}
    after = {
        True: [0, 0],
        False: [0, 0],
    }  # the others all cooperated last round -> [my cooperations, rounds]
    for rec in recs:
        env = replay(rec)
        seat = next(p for p, a in rec.seats.items() if a == who)
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
        total += sum(returns)
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
