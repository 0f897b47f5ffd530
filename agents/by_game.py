"""A player that is a different agent in each game: `{by_game: {GAME: SPEC, default: SPEC}}`."""

from __future__ import annotations

from collections.abc import Sequence

from agents import check_spec, make_agent
from core.records import TurnRecord


class ByGameAgent:
    """One player that is a different agent in each game (`{by_game: {GAME: SPEC}}`)."""

    def __init__(self, name: str, agents: dict, default=None):
        self.name = name
        self.agents = agents  # game name -> Agent
        self.default = default

    def act(self, turns: list) -> list[TurnRecord]:
        out: list = [None] * len(turns)
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(turns):
            groups.setdefault(t.env.info.name, []).append(i)
        for game, idx in groups.items():
            agent = self.agents.get(game, self.default)
            if agent is None:
                raise ValueError(f"player {self.name!r} has no agent for {game}")
            for i, rec in zip(idx, agent.act([turns[i] for i in idx])):
                out[i] = rec
        return out

    def end_match(self, match_id: str) -> None:
        for agent in [*self.agents.values(), self.default]:
            if agent is not None and hasattr(agent, "end_match"):
                agent.end_match(match_id)


def check_player(spec, games: Sequence[tuple[str, dict]] = ()) -> None:
    """`agents.check_spec` for a player's spec, each agent of a `{by_game: ...}` one included, against
    the (game, params) pairs it will play (each agent of a by_game spec: its own game; `default`: the
    others)."""
    per = spec["by_game"] if isinstance(spec, dict) and "by_game" in spec else {None: spec}
    for key, s in per.items():
        if key is None:
            mine = list(games)
        elif key == "default":
            mine = [(g, p) for g, p in games if g not in per]
        else:
            mine = [(g, p) for g, p in games if g == key]
        check_spec(s, mine)


def build_agent(name: str, spec):
    """An agent for one player: `agents.make_agent(spec, name)`, or a ByGameAgent."""
    if isinstance(spec, dict) and "by_game" in spec:
        per = dict(spec["by_game"])
        default = per.pop("default", None)
        return ByGameAgent(
            name,
            {g: make_agent(s, name) for g, s in per.items()},
            make_agent(default, name) if default is not None else None,
        )
    return make_agent(spec, name)
