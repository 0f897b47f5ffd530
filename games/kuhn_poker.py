"""Kuhn poker on OpenSpiel's rules (`pyspiel` game `kuhn_poker`, two players).

Rules      A deck of three cards, Jack < Queen < King. Both players put 1 chip in the pot
           (the ante) and get one private card; the third card stays hidden. player_0
           acts first. A player may Pass (put in nothing more) or Bet (put in 1 more chip).
           After a Bet, the other player may Bet (call) or Pass (fold: the bettor wins the
           pot). Pass-Pass or Bet-Bet ends in a showdown: the higher card wins the pot.
           Sequences: Pass Pass / Bet Bet / Bet Pass / Pass Bet Bet / Pass Bet Pass.
Moves      `Pass` (action 0) and `Bet` (action 1), OpenSpiel's ids and names.
Observation  OpenSpiel's observation tensor (player one-hot, private card one-hot, chips
           each player has put in) and an action mask of 2.
Rewards    at the end, chips won or lost: +-1 (ante) or +-2 (ante and bet); zero-sum. An
           illegal action: -1 to the offender, 0 to the other, game over.
Text       the player sees its own card, the pot and the betting so far, e.g.
               Your card: Q (Jack < Queen < King).
               Pot: 3 chips (you put in 1, your opponent 2).
               Your opponent bet. Bet to call (the showdown decides), or Pass to fold.
           The opponent's card is never shown. The state text alone tells every information
           state apart (player_0 facing a bet after its own pass reads "You passed, then your
           opponent bet."), so `prompt: state` loses nothing.
"""

from __future__ import annotations

from games.openspiel_env import OpenSpielEnv

CARDS = ("J", "Q", "K")
CARD_NAMES = ("Jack", "Queen", "King")
MOVES = ("Pass", "Bet")


class KuhnPoker(OpenSpielEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "kuhn_poker", "is_parallelizable": False}

    static_move_text = True  # Pass / Bet

    def __init__(self, render_mode: str | None = None, illegal_reward: float = -1.0):
        super().__init__("kuhn_poker", render_mode=render_mode, illegal_reward=illegal_reward)

    def _card(self, player: int) -> int:
        return self.moves[player][1]  # chance deals player 0's card, then player 1's

    def _bets(self) -> list[int]:
        return [a for p, a in self.moves if p >= 0]

    def rules_text(self, agent: str) -> str:
        me = self._index[agent]
        return (
            "Kuhn poker, two players. The deck has three cards: Jack (J) < Queen (Q) < King (K). "
            "Each player puts 1 chip into the pot (the ante) and is dealt one private card; the third card "
            "stays hidden. player_0 acts first.\n"
            "On your turn you either Pass (put in nothing more) or Bet (put in 1 more chip).\n"
            "- If nobody has bet yet: Pass checks; Bet puts 1 chip in and your opponent must answer.\n"
            "- If your opponent has bet: Bet calls (you put in 1 chip too); Pass folds and your opponent "
            "takes the pot.\n"
            "If both pass, or both bet, the cards are shown and the higher card takes the pot.\n"
            "Your reward is the chips you win or lose: +1/-1 when only the antes are at stake, "
            "+2/-2 after a bet is called.\n"
            f"You are {agent} ({'you act first' if me == 0 else 'your opponent acts first'}). "
            "You see your own card, never your opponent's."
        )

    def state_text(self, agent: str) -> str:
        me = self._index[agent]
        card = self._card(me)
        bets = self._bets()
        put_in = [1, 1]
        for i, a in enumerate(bets):
            put_in[i % 2] += a
        lines = [
            f"Your card: {CARDS[card]} ({CARD_NAMES[card]}; Jack < Queen < King).",
            f"Pot: {sum(put_in)} chips (you put in {put_in[me]}, your opponent {put_in[1 - me]}).",
        ]
        if self.state.is_terminal():
            r = self.state.returns()[me]
            lines.append(
                f"The game is over: you {'won' if r > 0 else 'lost'} {abs(r):g} chip{'s' if abs(r) != 1 else ''}."
            )
        elif self.state.current_player() != me:
            lines.append("Your opponent is to act.")
        elif 1 in bets and len(bets) == 2:  # Pass, Bet: player_0's second decision
            lines.append(
                "You passed, then your opponent bet. Bet to call (the showdown decides), or Pass to fold."
            )
        elif 1 in bets:
            lines.append("Your opponent bet. Bet to call (the showdown decides), or Pass to fold.")
        elif bets:
            lines.append("Your opponent passed. Pass to go to the showdown, or Bet 1 chip.")
        else:
            lines.append("You act first. Pass to check, or Bet 1 chip.")
        return "\n".join(lines)

    def move_text(self, agent: str, action: int) -> str:
        return MOVES[int(action)]

    def history_text(self, agent: str) -> list[str]:
        me = self._index[agent]
        return [f"{'you' if p == me else 'opponent'}: {MOVES[a]}" for p, a in self.moves if p >= 0]


def env(**kwargs) -> KuhnPoker:
    return KuhnPoker(**kwargs)
