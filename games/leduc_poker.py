"""Leduc hold'em on OpenSpiel's rules (`pyspiel` game `leduc_poker`, two players).

Rules      A deck of six cards: two Jacks, two Queens, two Kings. Both players ante 1 chip
           and get one private card. Two betting rounds; player_0 acts first in each.
           Round 1 bets and raises are 2 chips, round 2 bets and raises are 4 chips, at
           most two raises per round. Between the rounds one public card is revealed.
           Fold gives the pot to the other player. At the showdown a player whose card
           pairs the public card wins; otherwise the higher card wins; equal ranks split.
Moves      `Fold` (0), `Call` (1; a check when there is nothing to call), `Raise` (2):
           OpenSpiel's ids and names. Fold is only legal when facing a bet.
Observation  OpenSpiel's observation tensor (16 floats: player, private card, public card,
           chips put in) and an action mask of 3.
Rewards    at the end, chips won or lost (between -13 and +13); zero-sum. An illegal
           action: -1 to the offender, 0 to the other, game over.
Text       e.g.
               Round 2 of 2.
               Your card: K. Public card: Q.
               Pot: 10 chips (you put in 5, your opponent 5).
               Nothing to call. Raises this round: 0 of 2 (a raise is 4 chips).
           The opponent's card is never shown. The state text names the pot but not the
           betting that built it, so different information states can read alike: over
           the game's 936 information states it gives 90 distinct texts, and a policy that
           sees only it (`prompt: state`) cannot play every state apart. `prompt: compact`
           adds the move history and tells all 288 suit-classes of states apart.
"""

from __future__ import annotations

import re

from games.openspiel_env import OpenSpielEnv

RANKS = ("J", "Q", "K")
MOVES = ("Fold", "Call", "Raise")
_FIELD = re.compile(r"\[(Private|Round|Public|Ante):? ([^\]]*)\]")


class LeducPoker(OpenSpielEnv):
    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "leduc_poker",
        "is_parallelizable": False,
    }

    static_move_text = True  # Fold / Call / Raise

    def __init__(self, render_mode: str | None = None, illegal_reward: float = -1.0):
        super().__init__("leduc_poker", render_mode=render_mode, illegal_reward=illegal_reward)

    def _observed(self, player: int) -> dict[str, str]:
        """The fields of OpenSpiel's observation string for `player` (its own view)."""
        return dict(_FIELD.findall(self.state.observation_string(player)))

    def _rounds(self) -> list[list[tuple[int, int]]]:
        """Betting actions (player, action) of round 1 and round 2."""
        rounds, chance = [[], []], 0
        for player, action in self.moves:
            if player < 0:
                chance += 1
            else:
                rounds[1 if chance > 2 else 0].append((player, action))
        return rounds

    def rules_text(self, agent: str) -> str:
        me = self._index[agent]
        return (
            "Leduc hold'em, two players. The deck has six cards: two Jacks (J), two Queens (Q), two Kings (K); "
            "J < Q < K. Each player puts 1 chip into the pot (the ante) and is dealt one private card.\n"
            "There are two betting rounds; player_0 acts first in each. In round 1 a raise costs 2 chips, in "
            "round 2 it costs 4 chips; at most two raises per round. After round 1 one public card is revealed.\n"
            "Moves: Call puts in what is needed to match your opponent (a check when there is nothing to "
            "match); Raise matches and adds one raise; Fold (only when facing a raise) gives up the pot. "
            "A round ends when a raise is called, or when both players call without a raise.\n"
            "Showdown after round 2: if your card has the same rank as the public card (a pair) you win; "
            "otherwise the higher card wins; equal ranks split the pot.\n"
            "Your reward is the chips you win or lose (the pot minus what you put in).\n"
            f"You are {agent} ({'you act first' if me == 0 else 'your opponent acts first'}). "
            "You see your own card and the public card, never your opponent's card."
        )

    def state_text(self, agent: str) -> str:
        me = self._index[agent]
        seen = self._observed(me)
        put_in = [int(x) for x in seen["Ante"].split()]
        round_ = int(seen["Round"])
        public = RANKS[int(seen["Public"]) // 2] if "Public" in seen else "not revealed yet"
        lines = [
            f"Round {round_} of 2.",
            f"Your card: {RANKS[int(seen['Private']) // 2]}. Public card: {public}.",
            f"Pot: {sum(put_in)} chips (you put in {put_in[me]}, your opponent {put_in[1 - me]}).",
        ]
        if self.state.is_terminal():
            r = self.state.returns()[me]
            lines.append(
                "The game is over: "
                + (
                    f"you {'won' if r > 0 else 'lost'} {abs(r):g} chips."
                    if r
                    else "the pot was split."
                )
            )
            return "\n".join(lines)
        raises = sum(a == 2 for _, a in self._rounds()[round_ - 1])
        to_call = put_in[1 - me] - put_in[me]
        owe = (
            f"To call you must put in {to_call} more chips." if to_call > 0 else "Nothing to call."
        )
        lines.append(
            f"{owe} Raises this round: {raises} of 2 (a raise is {2 if round_ == 1 else 4} chips)."
        )
        if self.state.current_player() != me:
            lines.append("Your opponent is to act.")
        return "\n".join(lines)

    def move_text(self, agent: str, action: int) -> str:
        return MOVES[int(action)]

    def history_text(self, agent: str) -> list[str]:
        me = self._index[agent]
        lines, chance, round_ = [], 0, 1
        for player, action in self.moves:
            if player < 0:
                chance += 1
                if chance == 3:  # the public card; the first two are the private deals
                    round_ = 2
                    lines.append(f"public card revealed: {RANKS[action // 2]}")
            else:
                lines.append(
                    f"round {round_}, {'you' if player == me else 'opponent'}: {MOVES[action]}"
                )
        return lines


def env(**kwargs) -> LeducPoker:
    return LeducPoker(**kwargs)
