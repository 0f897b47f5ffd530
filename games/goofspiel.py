"""Goofspiel on OpenSpiel's rules (`pyspiel` game `goofspiel`, two players, simultaneous).

Rules      Each player holds the cards 1..N (`num_cards`, default 13); a deck of prize
           cards 1..N is turned up one per turn (`points_order`: random by default, or
           descending / ascending). Each turn both players secretly bid one card of their
           hand at the same time; the higher bid wins the prize card's value in points, a
           tie discards the prize. Bid cards are spent. When one card is left in each
           hand it is played automatically.
Moves      the value of the card to bid, "1".."N"; action id = value - 1 (OpenSpiel's).
Observation  OpenSpiel's observation tensor and an action mask of N.
Rewards    at the end, by `returns_type`: "win_loss" (default) +1 for more points, -1 for
           fewer, 0 for a tie; "point_difference" your points minus the players' average;
           "total_points" your points. An illegal action: -1 to the offender, 0 to the
           other, game over.
Information  After each turn both bids are shown (OpenSpiel's default); with
           `imp_info=True` only who won the prize is shown, and the opponent's hand is
           hidden. A bid made earlier in the same turn is never shown to the other player.
Text       e.g.
               Prize card this turn: 11.
               Prize cards still to come: 1 2 5 6 7 9 10 12 13 (in random order).
               Your hand: 1 2 3 4 6 7 8 10 11 12 13
               Opponent's hand: 1 3 4 5 6 7 8 9 11 12 13
               Points: you 3, opponent 8.
"""

from __future__ import annotations

import re

from games.openspiel_env import OpenSpielEnv

RETURNS = {
    "win_loss": "+1 if you end with more points than your opponent, -1 if fewer, 0 if equal",
    "point_difference": "your points minus the average points of the two players",
    "total_points": "your points",
}


class Goofspiel(OpenSpielEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "goofspiel", "is_parallelizable": True}

    static_move_text = True  # the card's value

    def __init__(self, render_mode: str | None = None, illegal_reward: float = -1.0, **params):
        super().__init__(
            "goofspiel", render_mode=render_mode, illegal_reward=illegal_reward, **params
        )
        p = self.game.get_parameters()
        if p["players"] != 2:
            raise ValueError(
                "the goofspiel text game is two-player; use 'openspiel:goofspiel' for more players"
            )
        self.num_cards, self.order, self.imp_info = p["num_cards"], p["points_order"], p["imp_info"]
        self.returns_type = p["returns_type"]
        self.num_turns = self.num_cards if p["num_turns"] < 0 else p["num_turns"]

    def _turns(self) -> tuple[list[int], list[tuple[int, list[int]]]]:
        """Prize cards turned up so far, and each played turn as (prize, [bid_0, bid_1])."""
        if self.order == "random":
            prizes = [a + 1 for p, a in self.moves if p == -1]
        else:
            prizes = list(
                range(self.num_cards, 0, -1)
                if self.order == "descending"
                else range(1, self.num_cards + 1)
            )
        bids = [[a + 1 for a in joint] for p, joint in self.moves if p == -2]
        if self.order != "random":
            prizes = prizes[: len(bids) + 1]
        return prizes, list(zip(prizes, bids))

    def rules_text(self, agent: str) -> str:
        n = self.num_cards
        order = {
            "random": "shuffled",
            "descending": f"in order from {n} down to 1",
            "ascending": f"in order from 1 up to {n}",
        }[self.order]
        shown = (
            "After each turn you learn only whether you won, lost or tied the prize; the opponent's bids stay secret."
            if self.imp_info
            else "After each turn both bids are shown."
        )
        auto = (
            " When each player has one card left, it is played automatically."
            if self.num_turns == n
            else ""
        )
        return (
            f"Goofspiel, two players. Each player holds the cards 1 to {n}. A deck of prize cards 1 to {n} is "
            f"turned up one card per turn ({order}); the game lasts {self.num_turns} turns.\n"
            "Each turn both players secretly and simultaneously bid one card from their hand. The higher bid "
            "wins points equal to the prize card's value; if the bids are equal nobody gets the prize. Bid "
            f"cards are used up.{auto} {shown}\n"
            f"Your reward at the end: {RETURNS[self.returns_type]}.\n"
            f"You are {agent}. A move is the value of a card in your hand."
        )

    def state_text(self, agent: str) -> str:
        me = self._index[agent]
        prizes, turns = self._turns()
        spent = [{bid[p] for _, bid in turns} for p in range(2)]
        points = [0, 0]
        for prize, bid in turns:
            if bid[0] != bid[1]:
                points[int(bid[1] > bid[0])] += prize
        lines = []
        if self.state.is_terminal():
            final = re.search(r"Points: (\d+) (\d+)", str(self.state))
            points = [int(final.group(1)), int(final.group(2))]
            r = self.state.returns()[me]
            lines.append(
                f"The game is over. Final points: you {points[me]}, opponent {points[1 - me]}. Your reward: {r:g}."
            )
            return "\n".join(lines)
        to_come = sorted(set(range(1, self.num_cards + 1)) - set(prizes))
        lines.append(
            f"Turn {len(turns) + 1} of {self.num_turns}. Prize card this turn: {prizes[-1]}."
        )
        if self.order == "random":
            lines.append(
                f"Prize cards still to come: {' '.join(map(str, to_come)) or 'none'} (in random order)."
            )
        hand = [c for c in range(1, self.num_cards + 1) if c not in spent[me]]
        lines.append(f"Your hand: {' '.join(map(str, hand))}")
        if not self.imp_info:
            other = [c for c in range(1, self.num_cards + 1) if c not in spent[1 - me]]
            lines.append(f"Opponent's hand: {' '.join(map(str, other))}")
        lines.append(f"Points: you {points[me]}, opponent {points[1 - me]}.")
        if not self.legal_actions(agent):
            lines.append("You have bid this turn; waiting for your opponent.")
        return "\n".join(lines)

    def move_text(self, agent: str, action: int) -> str:
        return str(int(action) + 1)

    def history_text(self, agent: str) -> list[str]:
        me = self._index[agent]
        lines = []
        for i, (prize, bid) in enumerate(self._turns()[1], 1):
            result = (
                "tie, nobody scores"
                if bid[0] == bid[1]
                else ("you win" if bid[me] > bid[1 - me] else "opponent wins")
            )
            theirs = "" if self.imp_info else f", opponent bid {bid[1 - me]}"
            lines.append(f"turn {i}: prize {prize}; you bid {bid[me]}{theirs}: {result}.")
        return lines


def env(**kwargs) -> Goofspiel:
    return Goofspiel(**kwargs)
