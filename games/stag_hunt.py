"""Iterated stag hunt (text-native; engine in `games.repeated_matrix`).

Rules      Two hunters, each round both choose simultaneously: Stag or Hare. A stag needs
           both hunters; a hare can be caught alone. Points per round (you, other): both
           Stag R,R; you Stag and the other Hare S,T; you Hare and the other Stag T,S; both
           Hare P,P. Defaults R=4, T=3, P=2, S=0 (R > T > P > S: mutual Stag is best, Hare
           is safe), 10 rounds.
Moves      action 0 = "Stag", 1 = "Hare".
Observation  `{"observation": float32[4], "action_mask": int8[2]}`: rounds played, own total,
           last round's moves (own, other; -1 before round 1).
Rewards    each round's points when the round resolves; cumulative reward = total points.
           Illegal action: -1 to the offender, 0 to the other, game over.
Dynamics   simultaneous, buffered per round; `games.make_parallel("stag_hunt")`.
Params     R, S, T, P; rounds=10; random_horizon / continuation / min_rounds / max_rounds
           (see `games.repeated_matrix`); illegal_reward=-1.
Bots       cooperate = Stag, defect = Hare.
"""

from __future__ import annotations

from games.repeated_matrix import MatrixGame

STORY = (
    "You are playing the iterated stag hunt against one other player. Each round you both go hunting: "
    "a Stag is caught only if both of you hunt it; a Hare can be caught alone."
)


def env(R: float = 4, S: float = 0, T: float = 3, P: float = 2, **params) -> MatrixGame:
    return MatrixGame("stag_hunt", ("Stag", "Hare"), STORY, R=R, S=S, T=T, P=P, **params)
