"""Iterated prisoner's dilemma (text-native; engine in `games.repeated_matrix`).

Rules      Two players, each round both choose simultaneously: Cooperate or Defect.
           Points per round (you, other): both Cooperate R,R; you Cooperate and the other
           Defects S,T; you Defect and the other Cooperates T,S; both Defect P,P.
           Defaults R=3, P=1, T=5, S=0 (T > R > P > S, 2R > T + S), 10 rounds, as in
           "Learning Robust Social Strategies" (AdAlignLLM).
Moves      action 0 = "Cooperate", 1 = "Defect" (move strings, answered e.g. `[Defect]`).
Observation  `{"observation": float32[4], "action_mask": int8[2]}`: rounds played, own total,
           last round's moves (own, other; -1 before round 1).
Rewards    each round's points when the round resolves; cumulative reward = total points.
           Illegal action: -1 to the offender, 0 to the other, game over.
Dynamics   simultaneous: AEC turns buffered per round, nobody sees the other's move before
           the round resolves; `games.make_parallel("prisoners_dilemma")` for the Parallel API.
Params     R, S, T, P; rounds=10; random_horizon=None | "geometric" | "uniform" with
           continuation / min_rounds / max_rounds (see `games.repeated_matrix`); players
           are told the horizon rule, never the drawn length. illegal_reward=-1.
           state_rounds=0: the state text also repeats the last k rounds (a memory-k prompt).
           state_progress=True: the state text names the round and the totals; False (with
           state_rounds) leaves only the last rounds, as "Last round: ...": a strict memory-k
           prompt that cannot tell one round from another.
Bots       cooperate = Cooperate, defect = Defect (`agents.social_bots`).
"""

from __future__ import annotations

from games.repeated_matrix import MatrixGame

STORY = "You are playing the iterated prisoner's dilemma against one other player."


def env(R: float = 3, S: float = 0, T: float = 5, P: float = 1, **params) -> MatrixGame:
    return MatrixGame(
        "prisoners_dilemma", ("Cooperate", "Defect"), STORY, R=R, S=S, T=T, P=P, **params
    )
