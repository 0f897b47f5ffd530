"""Scripted fishers for `commons`: `sustainable` and `greedy`.

    sustainable   asks its sustainable share of the stock (`games.commons`: the 1/n share of
                  the catch that leaves the stock at its most productive level, floor(max(0,
                  S - L*) / n)); if every player does, the stock never collapses
    greedy        asks `max_harvest`, the most a player may ask

In the discussion each says first, honestly, what it will take ("I will take 6."). They
are the social bots' always_cooperate and always_defect with the game's own names
(`env.social_action`); tit_for_tat and the other social strategies play commons too.
Bots hold no state between turns. Asked to play another game, a bot refuses with one line
before any match starts (`check_game`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import games
from agents.base import PendingTurn, WrongGame, decision
from core.records import TurnRecord

GAME = "commons"
COOPERATES = {"sustainable": True, "greedy": False}


@dataclass
class CommonsBot:
    """An `Agent` that always asks its sustainable share (`sustainable`) or the most it may (`greedy`)."""

    kind: str = "sustainable"
    name: str = ""  # defaults to the kind

    def __post_init__(self) -> None:
        if self.kind not in COOPERATES:
            raise ValueError(
                f"unknown commons bot {self.kind!r}; choose from {', '.join(COOPERATES)}"
            )
        self.name = self.name or self.kind

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) for any game but commons (before any match starts)."""
        env = games.make(game_name, **params)
        if env.metadata.get("name") != GAME:
            raise WrongGame(_refusal(self.name, game_name))

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        out = []
        for t in turns:
            env = getattr(t.env, "unwrapped", t.env)
            if env.metadata.get("name") != GAME:
                raise WrongGame(_refusal(self.name, env.metadata.get("name", type(env).__name__)))
            out.append(decision(t, self.name, env.social_action(t.player, COOPERATES[self.kind])))
        return out

    def end_match(self, match_id: str) -> None:
        pass


def _refusal(name: str, game: str) -> str:
    return f"commons bot {name!r} plays {GAME} only, not {game!r}"


# Agent factories by name, as `agents.make_agent` calls them: COMMONS_BOTS[name](agent_name).
COMMONS_BOTS: dict[str, Callable[..., CommonsBot]] = {k: partial(CommonsBot, k) for k in COOPERATES}
