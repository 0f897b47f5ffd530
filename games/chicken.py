"""Iterated chicken (hawk-dove) (text-native; engine in `games.repeated_matrix`).

Rules      Two drivers head for each other; each round both choose simultaneously: Swerve
           or Straight. Points per round (you, other): both Swerve R,R; you Swerve and the
           other goes Straight S,T; you Straight and the other Swerves T,S; both Straight
           (crash) P,P. Defaults T=4, R=3, S=1, P=0 (T > R > S > P), 10 rounds.
Moves      action 0 = "Swerve", 1 = "Straight".
Observation  `{"observation": float32[4], "action_mask": int8[2]}`: rounds played, own total,
           last round's moves (own, other; -1 before round 1).
Rewards    each round's points when the round resolves; cumulative reward = total points.
           Illegal action: -1 to the offender, 0 to the other, game over.
Dynamics   simultaneous, buffered per round; `games.make_parallel("chicken")`.
Params     R, S, T, P; rounds=10; random_horizon / continuation / min_rounds / max_rounds
           (see `games.repeated_matrix`); illegal_reward=-1.
Bots       cooperate = Swerve, defect = Straight.
"""

from __future__ import annotations

from games.repeated_matrix import MatrixGame

STORY = (
    "You are playing iterated chicken against one other player. Each round you drive toward each other: "
    "whoever Swerves avoids the crash; if both go Straight you crash."
)


def env(R: float = 3, S: float = 1, T: float = 4, P: float = 0, **params) -> MatrixGame:
    return MatrixGame("chicken", ("Swerve", "Straight"), STORY, R=R, S=S, T=T, P=P, **params)
