"""Liar's dice on OpenSpiel's rules (`pyspiel` game `liars_dice`, two players).

Rules      Each player rolls `numdice` dice (default 1) with `dice_sides` faces (default
           6) and sees only their own. Players bid in turn, player_0 first: "q x f"
           claims that at least q of all dice show face f. The highest face is wild: it
           counts as every face. Each bid must be higher than the last: more dice, or the
           same number of dice and a higher face (OpenSpiel's default "reset-face"
           rule). Instead of bidding, a player may call "Liar" on the last bid: all dice
           are shown; if the bid holds the bidder wins, otherwise the caller wins.
Moves      a bid `q x f` (OpenSpiel's bid "q-f"; with the default rule its id is
           (q-1)*dice_sides + f-1) or `Liar` (the last id); OpenSpiel's ids.
Observation  OpenSpiel's information-state tensor (own dice, bids so far) and an action
           mask.
Rewards    +1 to the winner, -1 to the loser at the end. An illegal action: -1 to the
           offender, 0 to the other, game over.
Text       e.g.
               Your dice: 4. Dice in play: 2 (1 each); 6 is wild.
               Last bid: 1 x 5, by your opponent.
           The opponent's dice are never shown.
"""

from __future__ import annotations

from games.openspiel_env import OpenSpielEnv


class LiarsDice(OpenSpielEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "liars_dice", "is_parallelizable": False}

    def __init__(self, render_mode: str | None = None, illegal_reward: float = -1.0, **params):
        super().__init__(
            "liars_dice", render_mode=render_mode, illegal_reward=illegal_reward, **params
        )
        p = self.game.get_parameters()
        self.numdice, self.sides, self.bidding_rule = (
            p["numdice"],
            p["dice_sides"],
            p["bidding_rule"],
        )
        start = self.game.new_initial_state()
        # OpenSpiel names bids "q-f" (the id order depends on the bidding rule); we write "q x f".
        self._names = [
            start.action_to_string(0, a).replace("-", " x ") for a in range(self.num_actions)
        ]

    def _dice(self, player: int) -> list[int]:
        """The player's own dice faces (chance rolls player 0's dice first, then player 1's)."""
        rolls = [a + 1 for p, a in self.moves if p < 0]
        return sorted(rolls[player * self.numdice : (player + 1) * self.numdice])

    def rules_text(self, agent: str) -> str:
        me, n, s = self._index[agent], self.numdice, self.sides
        higher = (
            "more dice, or the same number of dice and a higher face"
            if self.bidding_rule == "reset-face"
            else "a higher face, or the same face and more dice"
        )
        return (
            f"Liar's dice, two players. Each player secretly rolls {n} {'die' if n == 1 else 'dice'} with faces "
            f"1-{s} and sees only their own. Players take turns, player_0 first.\n"
            f'On your turn you either bid or call Liar. A bid "q x f" claims that at least q of all {2 * n} dice '
            f"(yours and your opponent's together) show face f. Face {s} is wild: it counts as every face. "
            f"Each bid must be higher than the last one: {higher}. The legal moves list exactly the bids allowed.\n"
            "Calling Liar (only after a bid) ends the game: all dice are shown. If at least q dice show f "
            "(wild faces included), the bidder wins; otherwise the caller wins.\n"
            "The winner gets +1, the loser -1.\n"
            f"You are {agent} ({'you bid first' if me == 0 else 'your opponent bids first'}). "
            "You see your own dice, never your opponent's."
        )

    def state_text(self, agent: str) -> str:
        me = self._index[agent]
        dice = " ".join(map(str, self._dice(me)))
        lines = [
            f"Your dice: {dice}. Dice in play: {2 * self.numdice} ({self.numdice} each); {self.sides} is wild."
        ]
        bids = [(p, a) for p, a in self.moves if p >= 0]
        if self.state.is_terminal():
            r = self.state.returns()[me]
            caller = "you" if bids[-1][0] == me else "your opponent"
            lines.append(
                f"{caller.capitalize()} called Liar on {self.move_text(agent, bids[-2][1])}. You {'won' if r > 0 else 'lost'}."
            )
        elif bids:
            who = "you" if bids[-1][0] == me else "your opponent"
            lines.append(f"Last bid: {self.move_text(agent, bids[-1][1])}, by {who}.")
        else:
            lines.append("No bid yet.")
        if not self.state.is_terminal() and self.state.current_player() != me:
            lines.append("Your opponent is to act.")
        return "\n".join(lines)

    def move_text(self, agent: str, action: int) -> str:
        return self._names[int(action)]

    def history_text(self, agent: str) -> list[str]:
        me = self._index[agent]
        return [
            f"{'you' if p == me else 'opponent'}: {self.move_text(agent, a)}"
            for p, a in self.moves
            if p >= 0
        ]


def env(**kwargs) -> LiarsDice:
    return LiarsDice(**kwargs)
