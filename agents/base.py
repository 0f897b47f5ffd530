"""The one agent interface: given the pending turns of many matches, a move for each.

The arena gathers every decision waiting on one agent across all running matches and
calls `agent.act(turns)` once, so an LLM agent answers them in a single backend batch and
a bot just loops. `act` returns one `TurnRecord` per turn, in order, with at least `move`
and `action` set (the arena fills `index`, `player`, `agent`, `reward`, `legal_moves`).
An agent never raises on bad model output: it applies its invalid-move policy and records
what happened in the returned record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.records import TurnRecord
from games.text_env import TextEnv


class WrongGame(ValueError):
    """An agent was asked to play a game it cannot play (MCTS on poker, CFR on tic-tac-toe)."""


@dataclass
class PendingTurn:
    match_id: str
    env: TextEnv  # the live env; read it (view, legal_actions, state), never step it
    player: str  # env agent to move, e.g. "player_0"
    rng: np.random.Generator  # per-match stream: seeded runs reproduce exactly
    explore: bool = False  # play a uniformly drawn legal move (an exploring start; constrained LLM agents, others ignore it)


class Agent(Protocol):
    name: str

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]: ...

    def end_match(self, match_id: str) -> None:
        """Forget per-match state (conversations). Optional."""
        ...


def decision(turn: PendingTurn, agent_name: str, action, **fields) -> TurnRecord:
    """A TurnRecord for `action` chosen at `turn` (move text filled from the env)."""
    move = fields.pop("move", None)
    if move is None:
        move = action if isinstance(action, str) else turn.env.move_text(turn.player, action)
    return TurnRecord(
        index=-1, player=turn.player, agent=agent_name, move=move, action=action, **fields
    )
