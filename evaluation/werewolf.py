"""Werewolf measures, read from the replayed matches (`arena eval` rows of kind "werewolf").

Each match is replayed in its env (same seed, same actions; `evaluation.social.replay`), which
holds the roles, every vote, every seer inspection and every message. Per (evaluated agent,
game, opponent) one row per role the agent was dealt, then a row pooled over its roles
(role "all"). The unit is a seat the agent held: `arena eval` seats it as a whole team
(`agent`, `agent#2`, ...), so a match counts once for each of its seats in a role, and the
"all" row weighs the village, which has more seats, above the wolves:

    matches               seats the agent played in that role (one per match and seat)
    win_rate, win_ci      share of them its team won (a draw or an illegal-move end is not a
                          win), Wilson 95% CI (`evaluation.stats.wilson`; matches are independent)
    votes                 the agent's day votes in that role (abstentions left out)
    on_wolves             share of them cast on a werewolf (None when the agent was a werewolf:
                          its own pack)
    village_on_wolves     share of all the village's day votes at the agent's tables (every
                          living village player, the agent or not; abstentions left out) cast on
                          a werewolf: how well the table's village found the werewolves
    findings              werewolves the agent found as the seer (seer and "all" rows)
    told                  share of those findings named ("player_3", as a whole word) in a
                          message the seer sent after the inspection: the finding reached the
                          village before the seer died (a dead seer sends no more messages)

The votes and findings of one match are not independent draws, so their CIs (`*_ci`) are the
ratio estimator's 95% t interval with the match as the unit (`evaluation.stats.ratio_ci`,
clipped to [0, 1]), as `evaluation.social` does for cooperation.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from core.records import MatchRecord
from evaluation.social import replay
from evaluation.stats import ratio_ci, wilson
from evaluation.suites import plan_key, unkey

GAMES = ("werewolf",)
ROLES = ("werewolf", "seer", "doctor", "villager")
ALL = "all"


@dataclass
class SeatFacts:
    """One seat's side of one Werewolf match."""

    role: str
    won: bool
    votes: int  # its day votes, abstentions left out
    on_wolves: int  # of them on a werewolf
    village_votes: int  # every village player's day votes at the table
    village_on_wolves: int
    found: int  # as the seer: werewolves it inspected
    told: int  # of them named in a later message of its own


def seat_facts(env, seat: str) -> SeatFacts:
    """`seat`'s facts in a replayed Werewolf match `env`."""
    i = env.possible_agents.index(seat)
    wolves = env.wolves()
    votes = [(v, t) for e in env.log if e.kind == "vote" for v, t in e.votes if t is not None]
    village = [t for v, t in votes if v not in wolves]
    found = told = 0
    for k, e in enumerate(env.log):
        if e.kind == "inspect" and e.actor == i and e.flag:
            found += 1
            name = re.compile(rf"(?<!\w)player_{e.target}(?!\w)")
            told += any(
                later.kind == "message" and later.actor == i and name.search(later.text)
                for later in env.log[k + 1 :]
            )
    mine = [t for v, t in votes if v == i]
    return SeatFacts(
        env.role_of[i],
        env.winner is not None and env.teams[seat] == env.winner,
        len(mine),
        sum(t in wolves for t in mine),
        len(village),
        sum(t in wolves for t in village),
        found,
        told,
    )


@dataclass
class WerewolfRow:
    agent: str
    game: str
    opponent: str
    role: str
    matches: int
    win_rate: float | None = None
    win_ci: tuple[float, float] | None = None
    votes: int = 0
    on_wolves: float | None = None
    on_wolves_ci: tuple[float, float] | None = None
    village_on_wolves: float | None = None
    village_on_wolves_ci: tuple[float, float] | None = None
    findings: int | None = None
    told: float | None = None
    told_ci: tuple[float, float] | None = None
    kind: str = "werewolf"


def _rate(pairs: list[tuple[int, int]]) -> tuple[float | None, tuple[float, float] | None]:
    """(share, clipped ratio CI) of (count, size) per match; (None, None) when all sizes are 0."""
    pairs = [(c, n) for c, n in pairs if n > 0]
    if not pairs:
        return None, None
    rate, lo, hi = ratio_ci([c for c, _ in pairs], [n for _, n in pairs])
    return rate, (max(0.0, lo), min(1.0, hi))


def role_row(who: str, game: str, opponent: str, role: str, facts: list[SeatFacts]) -> WerewolfRow:
    """The row of `facts` (the agent's seats dealt `role`, or every role: "all")."""
    wins = sum(f.won for f in facts)
    row = WerewolfRow(
        who, game, opponent, role, len(facts), wins / len(facts), wilson(wins, len(facts))
    )
    village = [f for f in facts if f.role != "werewolf"]
    row.votes = sum(f.votes for f in facts)
    if village:
        row.on_wolves, row.on_wolves_ci = _rate([(f.on_wolves, f.votes) for f in village])
    row.village_on_wolves, row.village_on_wolves_ci = _rate(
        [(f.village_on_wolves, f.village_votes) for f in facts]
    )
    seers = [f for f in facts if f.role == "seer"]
    if seers:
        row.findings = sum(f.found for f in seers)
        row.told, row.told_ci = _rate([(f.told, f.found) for f in seers])
    return row


def werewolf_rows(records: list[MatchRecord], who: str) -> list[WerewolfRow]:
    """The Werewolf rows of an evaluated agent.

    Args:
        records: evaluation matches (`evaluation.suites` match ids); other games are skipped.
        who: the evaluated agent's name in the matches' seats.

    Returns:
        Per (game, opponent): one row per role `who` was dealt (in `ROLES` order), then the
        row pooled over its roles (role "all").
    """
    groups: dict[tuple[str, str], list[SeatFacts]] = defaultdict(list)
    for rec in records:
        if rec.game not in GAMES or who not in rec.seats.values():
            continue
        game, opponent, _ = plan_key(rec.match_id)
        env = replay(rec)
        groups[(game, opponent)] += [  # every seat it held: a whole team when seated by teams
            seat_facts(env, s) for s, a in rec.seats.items() if a.split("#")[0] == who
        ]
    rows = []
    for (game, opponent), facts in sorted(groups.items()):
        for role in ROLES:
            mine = [f for f in facts if f.role == role]
            if mine:
                rows.append(role_row(who, unkey(game), unkey(opponent), role, mine))
        rows.append(role_row(who, unkey(game), unkey(opponent), ALL, facts))
    return rows
