"""Codewords measures, read from the replayed matches (`games.codewords`).

Each match is replayed in its env (same seed, same actions; `evaluation.social.replay`). The
unit is a team game: a match and a team the evaluated agent played in it (in `arena eval` it
plays both seats of one team, `agent` and `agent#2`, whose result and clues are one), its
clues the clues that team gave (a clue-giver's own, or those its guesser guessed on). Per
(evaluated agent, opponent) and side (`all` its seats, `red` / `blue` by team, `clue_giver` /
`guesser` by role):

    win_rate         share of its team games its team won, Wilson 95% CI (`win_ci`); a draw
                     (no winner after `max_turns`) is no win, its share is `draw_rate`
    assassin_rate    share of its team games in which its team revealed the assassin (and
                     so lost), Wilson CI
    words_per_clue   its team's own words revealed per clue (a void clue counts, with what
                     the guesser found after it), the ratio over its team games with its t
                     interval, the team game as the unit (`evaluation.stats.ratio_ci`)
    violations_per_clue  clue-giver seats only: share of its clues that broke the clue rule,
                     Wilson CI. A clue breaks it when the game voided it (a fallback's or a
                     scripted agent's message that is no legal clue), when the agent forfeited
                     it, or when any attempt at it was refused by the game's parser (a reply
                     its agent then retried): what a model writes first counts, not only what
                     it ends up playing. The void `NO_CLUE` action is no violation, nor is an
                     attempt lost to a backend error.

A turn whose clue was never asked for (a match stopped before it) is no clue.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from core.records import MatchRecord, TurnRecord
from evaluation.social import replay
from evaluation.stats import ratio_ci, wilson
from evaluation.suites import plan_key, unkey
from games.parsing import ERROR_KINDS

GAME = "codewords"
SIDES = ("all", "red", "blue", "clue_giver", "guesser")


@dataclass
class SeatResult:
    """One seat of one match, as the measures count it."""

    team: str
    role: str
    won: bool
    draw: bool
    assassin: bool
    found: list[int]  # own words revealed, per clue of its team
    violated: list[bool]  # per clue it gave (clue-giver seats), whether it broke the rule


@dataclass
class CodewordsRow:
    agent: str
    game: str
    opponent: str
    side: str
    seats: int  # seats it held
    games: int = 0  # team games: a match and the team it played there
    win_rate: float | None = None
    win_ci: tuple[float, float] | None = None
    draw_rate: float | None = None
    assassin_rate: float | None = None
    assassin_ci: tuple[float, float] | None = None
    clues: int = 0
    words_per_clue: float | None = None
    words_per_clue_ci: tuple[float, float] | None = None
    violations_per_clue: float | None = None
    violations_ci: tuple[float, float] | None = None
    kind: str = "codewords"


def seat_results(rec: MatchRecord, seat: str) -> SeatResult:
    """What `seat` did in one codewords match, from its replay."""
    records: dict[int, list[TurnRecord]] = defaultdict(list)  # env turn -> its clue's records

    def before(env, t: TurnRecord) -> None:
        if env.is_free_text(t.player):
            records[len(env.turns) - 1].append(t)

    env = replay(rec, before)
    team, role = env.teams[seat], env.roles[seat]
    unplayed = len(env.turns) - 1 if env.phase == "clue" and not records[len(env.turns) - 1] else -1
    found, violated = [], []
    for k, turn in enumerate(env.turns):
        if turn.team != team or k == unplayed:
            continue
        found.append(sum(kind == team for _, kind in turn.guesses))
        if role == "clue_giver":
            refused = any(_broke_rule(a.error) for t in records[k] for a in t.attempts)
            forfeit = any(t.action is None for t in records[k])
            violated.append(bool(turn.violation) or refused or forfeit)
    lost = env.winner is not None and env.winner != team
    return SeatResult(
        team,
        role,
        env.winner == team,
        env.end == "max_turns",
        lost and env.end == "assassin",
        found,
        violated,
    )


def _broke_rule(error: str | None) -> bool:
    """An attempt the game's parser refused (not a backend error or a bare truncation)."""
    return bool(error) and error.split(":", 1)[0] in ERROR_KINDS


def measures(row: CodewordsRow, results: list[tuple[str, SeatResult]]) -> CodewordsRow:
    """Fill `row` from (match id, seat result) pairs (the module doc's measures): the seats of
    one team in one match count once, as one team game."""
    teams: dict[tuple[str, str], SeatResult] = {}
    violated: list[bool] = []
    for match, r in results:
        teams.setdefault((match, r.team), r)
        violated += r.violated  # clue-giver seats only: one per team game
    row.seats, row.games = len(results), len(teams)
    units = list(teams.values())
    n = len(units)
    if not n:
        return row
    wins, killed = sum(r.won for r in units), sum(r.assassin for r in units)
    row.win_rate, row.win_ci = wins / n, wilson(wins, n)
    row.draw_rate = sum(r.draw for r in units) / n
    row.assassin_rate, row.assassin_ci = killed / n, wilson(killed, n)
    row.clues = sum(len(r.found) for r in units)
    if row.clues:
        rate, lo, hi = ratio_ci([sum(r.found) for r in units], [len(r.found) for r in units])
        row.words_per_clue, row.words_per_clue_ci = rate, (max(0.0, lo), hi)
    if violated:
        row.violations_per_clue = sum(violated) / len(violated)
        row.violations_ci = wilson(sum(violated), len(violated))
    return row


def _on_side(r: SeatResult, side: str) -> bool:
    return side == "all" or side in (r.team, r.role)


def codewords_rows(records: list[MatchRecord], who: str) -> list[CodewordsRow]:
    """The codewords rows of an evaluated agent.

    Args:
        records: evaluation matches (`evaluation.suites` match ids); other games are skipped.
        who: the evaluated agent's name in the matches' seats.

    Returns:
        Per opponent, a row per side of `SIDES` on which `who` sat (`all` first).
    """
    groups: dict[str, list[tuple[str, SeatResult]]] = defaultdict(list)
    for rec in records:
        if rec.game != GAME:
            continue
        _, opponent, _ = plan_key(rec.match_id)
        for seat, name in rec.seats.items():
            if name.split("#")[0] == who:  # its team's other seats are who#2, ...
                groups[opponent].append((rec.match_id, seat_results(rec, seat)))
    rows = []
    for opponent, results in sorted(groups.items()):
        for side in SIDES:
            mine = [(m, r) for m, r in results if _on_side(r, side)]
            if mine:
                rows.append(measures(CodewordsRow(who, GAME, unkey(opponent), side, 0), mine))
    return rows
