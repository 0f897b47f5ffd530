"""Plays many matches at once, batching LLM turns across matches, and records every turn.

`arena.single_agent(game, seat=..., opponents=..., **params)` is the Gymnasium view of a
game: one seat is the caller's, agent specs play the others (`arena.gym_env`).
"""


def __getattr__(name: str):
    if name in ("single_agent", "SingleAgentEnv"):  # start-up time: agents, on first use
        from arena import gym_env

        return getattr(gym_env, name)
    raise AttributeError(f"module 'arena' has no attribute {name!r}")
