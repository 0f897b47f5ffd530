"""Scripted social strategies: always cooperate, always defect, tit-for-tat, grim trigger,
win-stay-lose-shift (Pavlov), and a probe.

A strategy is a function of the cooperation history one player has seen — per resolved
round, whether it cooperated and whether each other player did — returning True to
cooperate now. The game turns that into a move (`env.social_action(player, cooperate)`)
and says what counts as cooperating (`env.cooperation_history(player)`):

    prisoners_dilemma   cooperate = Cooperate, defect = Defect
    stag_hunt           cooperate = Stag,      defect = Hare
    chicken             cooperate = Swerve,    defect = Straight
    public_goods        cooperate = contribute the whole endowment, defect = contribute 0;
                        another player "cooperated" if it put in at least half the endowment
    trust_and_split     messages are always honest ("My hand is rock."); cooperate = claim
                        all coins if your hand beats the hand the other player named this
                        round, none if it loses, half if the other named no single hand;
                        defect = claim all coins. A player "defected" in a round if it held
                        the losing hand and claimed more than half the coins.

With more than two players, "the others cooperated" means every other player did.

    always_cooperate      always cooperate
    always_defect         always defect
    tit_for_tat           cooperate first, then cooperate iff the others cooperated last round
    grim_trigger          cooperate until any other player defects once, then defect forever
    win_stay_lose_shift   cooperate first; if the others cooperated last round ("win") repeat
                          your own last move, else switch (Pavlov; in the prisoner's dilemma:
                          stay after R or T, shift after S or P)
    probe                 tit-for-tat that defects once, in round 2: the other's answer
                          tells tit-for-tat (it retaliates once, then cooperates again
                          after its own retaliation met cooperation) from grim trigger (it
                          never cooperates again); an evaluation opponent

Bots hold no state between turns (everything is read from the env), so `end_match` is a
no-op and one bot can play any number of matches at once. Other games (tic-tac-toe,
negotiation, ...) have no cooperate/defect moves: `act` raises a ValueError naming the game.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import games
from agents.base import PendingTurn, WrongGame, decision
from core.records import TurnRecord

History = list[
    tuple[bool, tuple[bool, ...]]
]  # per round: (I cooperated, each other player cooperated)
SOCIAL_GAMES = (
    "prisoners_dilemma",
    "stag_hunt",
    "chicken",
    "public_goods",
    "trust_and_split",
    "commons",
)


def always_cooperate(history: History) -> bool:
    return True


def always_defect(history: History) -> bool:
    return False


def tit_for_tat(history: History) -> bool:
    return not history or all(history[-1][1])


def grim_trigger(history: History) -> bool:
    return all(all(others) for _, others in history)


def probe(history: History) -> bool:
    return len(history) != 1 and tit_for_tat(history)


def win_stay_lose_shift(history: History) -> bool:
    if not history:
        return True
    mine, others = history[-1]
    return mine if all(others) else not mine


POLICIES: dict[str, Callable[[History], bool]] = {
    "always_cooperate": always_cooperate,
    "always_defect": always_defect,
    "tit_for_tat": tit_for_tat,
    "grim_trigger": grim_trigger,
    "win_stay_lose_shift": win_stay_lose_shift,
    "probe": probe,
}


@dataclass
class SocialBot:
    """An `Agent` playing one scripted strategy (a key of `STRATEGIES`)."""

    strategy: str = "tit_for_tat"
    name: str = ""  # defaults to the strategy name

    def __post_init__(self) -> None:
        if self.strategy not in POLICIES:
            raise ValueError(
                f"unknown social strategy {self.strategy!r}; choose from {', '.join(POLICIES)}"
            )
        self.name = self.name or self.strategy

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) for a game without cooperate/defect moves (before any match starts)."""
        env = games.make(game_name, **params)
        if not hasattr(getattr(env, "unwrapped", env), "cooperation_history"):
            raise WrongGame(_refusal(self.name, game_name))

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        return [social_decision(turn, self.name, POLICIES[self.strategy]) for turn in turns]

    def end_match(self, match_id: str) -> None:
        pass


def _refusal(name: str, game: str) -> str:
    return f"social bot {name!r} cannot play {game!r}: it needs a game with cooperate/defect moves ({', '.join(SOCIAL_GAMES)})"


def social_decision(
    turn: PendingTurn, name: str, cooperates: Callable[[History], bool], **fields
) -> TurnRecord:
    """The move of agent `name` at `turn`: cooperate if `cooperates(the history it has seen)` (`fields`: more of the
    TurnRecord); WrongGame for a game without cooperate/defect moves."""
    env = getattr(turn.env, "unwrapped", turn.env)
    if not hasattr(env, "cooperation_history"):
        raise WrongGame(_refusal(name, env.metadata.get("name", type(env).__name__)))
    cooperate = cooperates(env.cooperation_history(turn.player))
    return decision(turn, name, env.social_action(turn.player, cooperate), **fields)


# Agent factories by strategy name, as `agents.make_agent` calls them: STRATEGIES[name](agent_name).
STRATEGIES: dict[str, Callable[..., SocialBot]] = {k: partial(SocialBot, k) for k in POLICIES}
