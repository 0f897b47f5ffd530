"""Repeated n-player public goods game (text-native; engine in `games.repeated_matrix`).

Rules      n players. Each round every player receives `endowment` tokens and chooses,
           simultaneously, how many of them (0..endowment) to put into a common pot. The pot
           is multiplied by `multiplier` and shared equally by all n players; kept tokens
           stay with their owner. Round payoff of player i:
               endowment - c_i + multiplier * (c_1 + ... + c_n) / n.
           With 1 < multiplier < n everyone contributing is best for the group, yet each
           token contributed returns only multiplier / n < 1 to its owner: a social dilemma.
           Defaults: n=4 players, endowment=10, multiplier=1.6, 10 rounds.
Moves      action c = contribute c tokens, c in 0..endowment; the move string is the
           number ("0" .. "10"), answered e.g. `[7]`.
Observation  `{"observation": float32[2 + n], "action_mask": int8[endowment + 1]}`: rounds
           played, own total, last round's contributions (own first, then the others in
           seat order; -1 before round 1).
State text the totals and each past round's contributions and points: yours first, then the
           others in seat order.
Rewards    each round's payoff when the round resolves; cumulative reward = total payoff.
           Illegal action: -1 to the offender, 0 to the others, game over.
Dynamics   simultaneous, buffered per round (seat order); `games.make_parallel("public_goods")`.
Params     num_players=4, endowment=10, multiplier=1.6; rounds=10; random_horizon /
           continuation / min_rounds / max_rounds (see `games.repeated_matrix`);
           illegal_reward=-1. state_rounds=0: the state text also repeats the last k rounds
           (a memory-k prompt); state_progress=True: the round and the totals in it, False
           (with state_rounds) the last rounds alone, as "Last round: ..." (a strict memory-k
           prompt). others_summed=True: each round in the state text gives the others'
           contributions as one sum ("you put in 1, the others 2 of 3; your points 1.2"),
           which a small model reads more easily than a list of numbers.
Bots       cooperate = contribute the whole endowment, defect = contribute 0; a
           contribution of at least half the endowment counts as cooperating when bots
           judge the others (tit-for-tat cooperates iff every other player did).
"""

from __future__ import annotations

import numpy as np

from games.repeated_matrix import RepeatedGame, check_state_text, horizon


class PublicGoods(RepeatedGame):
    def __init__(
        self,
        num_players: int = 4,
        endowment: int = 10,
        multiplier: float = 1.6,
        rounds: int = 10,
        random_horizon: str | None = None,
        continuation: float | None = None,
        min_rounds: int | None = None,
        max_rounds: int | None = None,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
        state_rounds: int = 0,
        state_progress: bool = True,
        others_summed: bool = False,
    ):
        if not isinstance(num_players, (int, np.integer)) or num_players < 2:
            raise ValueError(f"num_players must be an integer >= 2, got {num_players!r}")
        if not isinstance(endowment, (int, np.integer)) or not 1 <= endowment <= 1000:
            raise ValueError(f"endowment must be an integer in 1..1000, got {endowment!r}")
        if not isinstance(multiplier, (int, float, np.integer, np.floating)) or not multiplier > 0:
            raise ValueError(f"multiplier must be a positive number, got {multiplier!r}")
        check_state_text(state_rounds, state_progress)
        if not isinstance(others_summed, (bool, np.bool_)):
            raise ValueError(f"others_summed must be true or false, got {others_summed!r}")
        h = horizon(rounds, random_horizon, continuation, min_rounds, max_rounds)
        super().__init__(int(num_players), int(endowment) + 1, h, render_mode, illegal_reward)
        self.metadata = {**self.metadata, "name": "public_goods"}
        self.state_rounds = int(state_rounds)
        self.state_progress = bool(state_progress)
        self.others_summed = bool(others_summed)
        self.endowment = int(endowment)
        self.multiplier = float(multiplier)
        self.cooperate_action = self.endowment
        self.defect_action = 0

    def payoffs(self, joint: tuple[int, ...]) -> tuple[float, ...]:
        share = self.multiplier * sum(joint) / self.num_players
        return tuple(self.endowment - c + share for c in joint)

    def is_cooperative(self, action: int) -> bool:
        return 2 * action >= self.endowment

    def move_text(self, agent: str, action: int) -> str:
        return str(int(action))

    def game_rules(self, agent: str) -> str:
        n, e, m = self.num_players, self.endowment, self.multiplier
        others = ", ".join(a for a in self.possible_agents if a != agent)
        return (
            f"You are {agent} in a repeated public goods game with {n} players (the others: {others}).\n"
            f"Each round every player receives {e} tokens and chooses, simultaneously, how many of them (0 to {e}) "
            "to put into a common pot; you see the others' contributions only after the round.\n"
            f"The pot is multiplied by {m:g} and shared equally among all {n} players; tokens you keep are yours.\n"
            f"Your points for a round = {e} - (your contribution) + {m:g} x (total contributions) / {n}.\n"
            f"Answer with the number of tokens you contribute, e.g. [{e // 2}]."
        )

    def describe_round(self, agent: str, joint: tuple[int, ...], payoffs: tuple[float, ...]) -> str:
        if self.others_summed:
            i = self._index[agent]
            others = sum(joint) - joint[i]
            most = (self.num_players - 1) * self.endowment
            return (
                f"you put in {joint[i]}, the others {others} of {most}; your points {payoffs[i]:g}"
            )
        total = sum(joint)
        contributions = ", ".join(
            f"{self.other(agent, p)} {joint[p]}" for p in self.observer_first(agent)
        )
        points = ", ".join(
            f"{self.other(agent, p)} {payoffs[p]:g}" for p in self.observer_first(agent)
        )
        return (
            f"contributions: {contributions}; pot {total} x {self.multiplier:g} = {total * self.multiplier:g}, "
            f"{total * self.multiplier / self.num_players:g} to each; points: {points}"
        )


def env(**params) -> PublicGoods:
    return PublicGoods(**params)
