"""A recorded match turn by turn, as the match viewer shows it.

Each turn keeps what its player saw, which is that player's own view: the chat messages
the arena sent its agent (`TurnRecord.messages`, LLM turns; a bot's turn has none), every
reply it gave with the parse error of each rejected one, the move the arena applied, the
reply's log-probabilities and the distribution the move was drawn from where they were
recorded. The board games (`BOARD_GAMES`) add the board after each move, rebuilt by
replaying the match's env from its seed and actions (`games.make`; the rows are
OpenSpiel's own rendering of its state), so the picture is the rules', not a guess from
text. In the games of talk a turn's `said` is its message, for the log of the match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import games
from core.records import MatchRecord, TurnRecord

BOARD_GAMES = ("tic_tac_toe", "connect_four")
_MARKS = {"x": "X", "o": "O"}


@dataclass
class TurnView:
    """One decision of a match, as the viewer shows it."""

    index: int
    seat: str  # env agent ("player_0")
    agent: str  # the player in that seat
    move: str
    valid: bool
    retries: int
    fallback: str | None
    finish_reason: str | None
    messages: list[dict]  # the player's own view (chat messages; empty for a bot)
    replies: list[tuple[str, str | None]]  # (completion, parse error or None) per reply tried
    logprobs: dict | None  # {"tokens", "sum", "mean", "values"} of the deciding reply
    action_probs: list[list]  # [[action, probability], ...] where recorded
    said: str | None = None  # the message, in a game of talk
    board: list[list[str]] | None = None  # rows after this move (board games)


@dataclass
class Replay:
    """A match for the viewer: its record, its turns and the board before the first move."""

    record: MatchRecord
    turns: list[TurnView]
    board: list[list[str]] | None = None  # before the first move (board games)
    notes: list[str] = field(default_factory=list)  # why a board is missing

    @property
    def seconds(self) -> float | None:
        r = self.record
        return r.finished_at - r.started_at if r.started_at and r.finished_at else None


def _logprobs(t: TurnRecord) -> dict | None:
    if not t.logprobs:
        return None
    total = float(sum(t.logprobs))
    return {
        "tokens": len(t.logprobs),
        "sum": total,
        "mean": total / len(t.logprobs),
        "values": [round(float(x), 4) for x in t.logprobs],
    }


def turn_view(t: TurnRecord) -> TurnView:
    """What the viewer shows of one turn (no board)."""
    replies = [(a.completion, a.error) for a in t.attempts]
    if not replies and t.completion:
        replies = [(t.completion, None)]
    return TurnView(
        t.index,
        t.player,
        t.agent,
        t.move,
        t.valid,
        t.retries,
        t.fallback,
        t.finish_reason,
        list(t.messages),
        replies,
        _logprobs(t),
        [[a, float(p)] for a, p in t.action_probs if math.isfinite(float(p))],
        said=t.action if isinstance(t.action, str) else None,
    )


def _grid(env) -> list[list[str]]:
    """The board of a replayed OpenSpiel env: its state's rows, "" for an empty cell."""
    rows = str(env.unwrapped.state).splitlines()
    return [[_MARKS.get(c, "") for c in row] for row in rows if row.strip()]


def boards(record: MatchRecord) -> list[list[list[str]]]:
    """The board before the first move and after each turn's move (a turn without an
    action, a forfeit, leaves it as it was), replaying the env from the record's seed."""
    env = games.make(record.game, **record.params)
    env.reset(seed=record.seed)
    out = [_grid(env)]
    for t in record.turns:
        if t.action is not None and env.unwrapped.agents:
            env.step(t.action)
        out.append(_grid(env))
    return out


def replay(record: MatchRecord) -> Replay:
    """The viewer's match: a TurnView per turn, with boards for the board games."""
    view = Replay(record, [turn_view(t) for t in record.turns])
    if record.game in BOARD_GAMES:
        try:
            grids = boards(record)
        except Exception as e:  # a record the env cannot replay still shows its turns
            view.notes.append(f"no board: the env could not replay the record ({e})")
        else:
            view.board = grids[0]
            for turn, grid in zip(view.turns, grids[1:]):
                turn.board = grid
    return view
