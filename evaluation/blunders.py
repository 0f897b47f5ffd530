"""Move quality against an exact solver: the share of an agent's moves that lower the
game-theoretic value of the position (win -> draw, draw -> loss, win -> loss).

The solver is the minimax bot's full-depth alpha-beta search (`agents.bots.MinimaxAgent.
move_values`, cached per position), so this works where that bot does: two-player
zero-sum deterministic perfect-information games short enough to search to the end
(tic-tac-toe; `openspiel:` games of at most `FULL_SEARCH_PLIES` plies). A move is a
blunder when its value is below the best move's value, for the player making it.

    rows = blunder_rows(records, "agent")                         # from evaluation matches
    rate = expected_blunder_rate(agent, "tic_tac_toe", [[0, 3, 1, 4]])  # on fixed positions
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import games
from agents.base import WrongGame
from agents.bots import MinimaxAgent
from core.records import MatchRecord
from evaluation.exploitability import distributions
from evaluation.stats import wilson

_SOLVER = MinimaxAgent("solver")  # one cache of position values per process


@dataclass
class BlunderRow:
    agent: str
    game: str
    seat: str  # "player_0", ... or "all"
    moves: int  # the agent's moves judged
    blunders: int
    rate: float
    ci: tuple[float, float]  # Wilson 95%
    win_to_draw: int
    draw_to_loss: int
    win_to_loss: int
    kind: str = "blunders"


def _outcome(v: float) -> str:
    return "win" if v > 1e-9 else "loss" if v < -1e-9 else "draw"


def judge(state, action: int) -> str | None:
    """ "win_to_draw" etc. when `action` lowers the value of `state` for the mover, else None."""
    values = _SOLVER.move_values(state)
    best, got = max(values.values()), values[int(action)]
    if got >= best - 1e-9:
        return None
    return f"{_outcome(best)}_to_{_outcome(got)}"


def solvable(game_name: str, params: dict | None = None) -> bool:
    """Can the solver judge this game's positions?"""
    env = games.make(game_name, **(params or {}))
    game = getattr(env, "game", None)
    if game is None:
        return False
    try:
        _SOLVER.move_values(game.new_initial_state())
    except WrongGame:
        return False
    return True


def match_blunders(record: MatchRecord, who: str) -> list[tuple[str, str | None]]:
    """(seat, blunder kind or None) for each of `who`'s moves in the match."""
    game = games.make(record.game, **record.params).game
    state = game.new_initial_state()
    out = []
    for t in record.turns:
        if t.action is None:  # a forfeit: the match ended there
            break
        if t.agent == who:
            out.append((t.player, judge(state, t.action)))
        state.apply_action(int(t.action))
    return out


def blunder_rows(records: list[MatchRecord], who: str) -> list[BlunderRow]:
    """Per solvable game: `who`'s blunder rate per seat and over both seats."""
    by_game: dict[tuple[str, str], list] = defaultdict(list)
    ok: dict[tuple[str, str], bool] = {}
    for rec in records:
        key = (rec.game, repr(sorted(rec.params.items())))
        if key not in ok:
            ok[key] = solvable(rec.game, rec.params)
        if ok[key] and who in rec.seats.values():
            by_game[key] += match_blunders(rec, who)
    rows = []
    for (game, _), moves in by_game.items():
        for seat in [*sorted({s for s, _ in moves}), "all"]:
            kinds = [k for s, k in moves if seat in ("all", s)]
            bad = sum(k is not None for k in kinds)
            rows.append(
                BlunderRow(
                    who,
                    game,
                    seat,
                    len(kinds),
                    bad,
                    bad / max(len(kinds), 1),
                    wilson(bad, len(kinds)),
                    kinds.count("win_to_draw"),
                    kinds.count("draw_to_loss"),
                    kinds.count("win_to_loss"),
                )
            )
    return rows


def expected_blunder_rate(
    agent,
    game_name: str,
    positions: list[list[int]],
    params: dict | None = None,
    samples: int = 8,
    seed: int = 0,
) -> float:
    """The agent's expected blunder rate over `positions` (OpenSpiel action histories, each
    weighted equally), from its move distribution there (`evaluation.exploitability.distributions`:
    exact for bots and constrained LLMs, sampled otherwise)."""
    game = games.make(game_name, **(params or {})).game
    states = []
    for history in positions:
        state = game.new_initial_state()
        for a in history:
            state.apply_action(a)
        states.append(state)
    dists, _, _ = distributions(agent, game_name, dict(params or {}), states, samples, seed)
    return sum(
        sum(p for a, p in d.items() if judge(s, a) is not None) for s, d in zip(states, dists)
    ) / len(states)
