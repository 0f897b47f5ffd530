"""Commons measures, read from the replayed matches (`games.commons`).

Each match is replayed in its env (same seed, same actions, `evaluation.social.replay`); per
(evaluated agent, game, opponent), with the match as the unit:

    rounds          rounds played, mean and 95% t CI: the game's `rounds` unless the stock
                    collapsed (the round of the collapse counts) or a move was illegal
    collapsed       share of matches in which the stock collapsed, Wilson 95% CI
    harvest_share   the catch of all players together as a share of the sustainable optimum
                    (`games.commons.sustainable_optimum`: the most any schedule of catches
                    takes over the whole horizon), mean and 95% t CI; 1 is the best the
                    players could have done together, whatever the stock did
    gini            the Gini index of the players' catches (`evaluation.social.gini`: 0 all
                    equal, (n - 1) / n one player caught everything), mean and 95% t CI
    agent_catch     the evaluated agent's mean catch per match

An agent that met more than one opponent also has a row pooled over them (opponent "all").
The social-dilemma rows (`evaluation.social`) cover commons too: cooperation (asking at most
the sustainable share), reciprocity, the memory-1 profile.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from core.records import MatchRecord
from evaluation.social import ALL, gini, replay
from evaluation.stats import mean_ci, wilson
from evaluation.suites import plan_key, unkey

GAME = "commons"


@dataclass
class CommonsRow:
    agent: str
    game: str
    opponent: str
    matches: int
    rounds: float
    rounds_ci: tuple[float, float]
    collapsed: float
    collapsed_ci: tuple[float, float]
    harvest_share: float
    harvest_share_ci: tuple[float, float]
    gini: float
    gini_ci: tuple[float, float]
    agent_catch: float
    kind: str = "commons"


@dataclass
class MatchFacts:
    """What one commons match says about the stock and the catches."""

    rounds: int
    collapsed: bool
    harvest_share: float
    gini: float
    agent_catch: int


def match_facts(rec: MatchRecord, who: str) -> MatchFacts:
    """The commons facts of one match, `who` being the evaluated agent's name in its seats."""
    env = replay(rec)
    seat = env.possible_agents.index(next(p for p, a in rec.seats.items() if a == who))
    catches = [sum(r.catches[p] for r in env.results) for p in range(env.num_players)]
    optimum = env.sustainable_optimum()
    return MatchFacts(
        rounds=len(env.results),
        collapsed=any(r.collapsed for r in env.results),
        harvest_share=sum(catches) / optimum if optimum else 1.0,
        gini=gini(catches),
        agent_catch=catches[seat],
    )


def commons_row(who: str, game: str, opponent: str, facts: list[MatchFacts]) -> CommonsRow:
    """The row of `who` against `opponent` over the facts of its matches."""
    rounds, *rounds_ci = mean_ci([f.rounds for f in facts])
    share, *share_ci = mean_ci([f.harvest_share for f in facts])
    g, *g_ci = mean_ci([f.gini for f in facts])
    collapsed = sum(f.collapsed for f in facts)
    return CommonsRow(
        agent=who,
        game=game,
        opponent=opponent,
        matches=len(facts),
        rounds=rounds,
        rounds_ci=tuple(rounds_ci),
        collapsed=collapsed / len(facts),
        collapsed_ci=wilson(collapsed, len(facts)),
        harvest_share=share,
        harvest_share_ci=tuple(share_ci),
        gini=g,
        gini_ci=tuple(g_ci),
        agent_catch=sum(f.agent_catch for f in facts) / len(facts),
    )


def commons_rows(records: list[MatchRecord], who: str) -> list[CommonsRow]:
    """The commons rows of an evaluated agent.

    Args:
        records: evaluation matches (`evaluation.suites` match ids); other games are skipped.
        who: the evaluated agent's name in the matches' seats.

    Returns:
        One row per (commons entry, opponent) `who` played, and where it met more than one
        opponent in an entry a row pooled over them (opponent "all") after them.
    """
    groups: dict[str, dict[str, list[MatchFacts]]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        if rec.game == GAME and who in rec.seats.values():
            game, opponent, _ = plan_key(rec.match_id)
            groups[game][opponent].append(match_facts(rec, who))
    rows = []
    for game in sorted(groups):
        mine = groups[game]
        for opponent in sorted(mine):
            rows.append(commons_row(who, unkey(game), unkey(opponent), mine[opponent]))
        if len(mine) > 1:
            pooled = [f for opponent in sorted(mine) for f in mine[opponent]]
            rows.append(commons_row(who, unkey(game), ALL, pooled))
    return rows
