"""What every game in the catalogue shares: metadata, the text view, and AEC bookkeeping.

A game is a PettingZoo AEC env (`TextEnv`) with a text layer on top. The text layer is
four questions a game answers for one player at one decision:

- `rules_text(agent)`   the rules, as that player is told them;
- `state_text(agent)`   the state exactly as that player may see it (no hidden info);
- `history_text(agent)` the turn history that player has seen, one line per event;
- `legal_moves(agent)`  the legal moves as strings, aligned with `legal_actions(agent)`.

`view(agent)` bundles them into a `TextView`; `parse(agent, reply)` turns a model's reply
into exactly one env action or raises `ParseError` (see `games.parsing`). Text is built
only when asked for, so random play never pays for it.

Illegal actions at the env level (an action outside the mask) follow PettingZoo classic:
the offender gets `illegal_reward` (default -1), everyone else 0, and the game ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv

from games.parsing import ParseError, parse_move, strip_thinking


@dataclass(frozen=True)
class GameInfo:
    """Catalogue metadata of one game."""

    name: str
    num_players: int
    information: str  # "perfect" | "imperfect"
    kind: str  # "competitive" | "cooperative" | "social_dilemma" | "general_sum"
    dynamics: str  # "sequential" | "simultaneous" | "mixed"
    split: str  # "train" | "held_out" | "extra"  (MARS split for its games)
    source: str  # "openspiel" | "native"
    description: str = ""


@dataclass(slots=True)
class TextView:
    """Everything one player may know at one decision, as text."""

    agent: str
    rules: str
    state: str
    history: list[str]
    legal_moves: list[str]  # move strings, aligned with `actions`
    actions: list[Any]  # env actions, aligned with `legal_moves`
    free_text: bool = False  # the move is free text (a message); legal_moves is then empty
    max_chars: int = 0  # for free-text moves: the longest message accepted

    def prompt(self) -> str:
        """A single self-contained user prompt (rules, history, state, legal moves)."""
        parts = [f"GAME RULES:\n{self.rules}"]
        if self.history:
            parts.append("HISTORY:\n" + "\n".join(self.history))
        parts.append(f"CURRENT STATE:\n{self.state}")
        if self.free_text:
            parts.append(f"Write your message (at most {self.max_chars} characters).")
        else:
            parts.append("LEGAL MOVES: [" + "], [".join(self.legal_moves) + "]")
        return "\n\n".join(parts)


class TextEnv(AECEnv):
    """Base of every game: AEC bookkeeping plus the text-layer contract.

    Subclasses set `info`, `possible_agents`, spaces, and implement `reset`, `step`,
    `observe`, `legal_actions` and the four text methods.
    """

    metadata = {"render_modes": ["human", "ansi"], "is_parallelizable": False}
    info: GameInfo
    ROLES: tuple[str, ...] = ()  # the roles a game of roles can deal (its `roles` values)
    TEAMS: tuple[str, ...] = ()  # a game of teams' team names in a fixed order (its first: side 0)

    def __init__(self, render_mode: str | None = None, illegal_reward: float = -1.0):
        super().__init__()
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.illegal_reward = float(illegal_reward)
        self.np_random, _ = seeding.np_random(None)
        # Set by a game of roles or teams at each reset (`seat_groups` turns teams into sides):
        self.roles: dict[str, str] = {}  # agent -> its role in this match ("seer", "guesser")
        self.teams: dict[str, str] = {}  # agent -> its team in this match ("wolves", "red")

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    # --- text layer (subclasses override) -------------------------------------------
    def rules_text(self, agent: str) -> str:
        raise NotImplementedError

    def state_text(self, agent: str) -> str:
        raise NotImplementedError

    def history_text(self, agent: str) -> list[str]:
        return []

    def legal_actions(self, agent: str | None = None) -> list[Any]:
        raise NotImplementedError

    def move_text(self, agent: str, action: Any) -> str:
        raise NotImplementedError

    def legal_moves(self, agent: str | None = None) -> list[str]:
        return list(self.legal_pairs(agent or self.agent_selection)[1])

    def legal_pairs(self, agent: str) -> tuple[list[Any], list[str]]:
        """(legal actions, their move strings) of `agent` now. A game may hand out the same
        lists for as long as its state does not change (`OpenSpielEnv`): do not modify them."""
        actions = self.legal_actions(agent)
        return actions, [self.move_text(agent, a) for a in actions]

    def is_free_text(self, agent: str) -> bool:
        """True when this agent's current move is a free-text message."""
        return False

    max_message_chars = 500

    def view(self, agent: str | None = None) -> TextView:
        agent = agent or self.agent_selection
        free = self.is_free_text(agent)
        actions, moves = ([], []) if free else self.legal_pairs(agent)
        return TextView(  # positional: TextView's field order
            agent,
            self.rules_text(agent),
            self.state_text(agent),
            self.history_text(agent),
            list(moves),
            list(actions),
            free,
            self.max_message_chars if free else 0,
        )

    def parse(self, agent: str, reply: str) -> Any:
        """Turn a model's reply into one legal env action, or raise `ParseError`."""
        if self.is_free_text(agent):
            return parse_message(reply, self.max_message_chars)
        actions, moves = self.legal_pairs(agent)
        return actions[parse_move(reply, moves)]

    # --- rendering --------------------------------------------------------------------
    def render(self) -> str | None:
        if self.render_mode is None:
            return None
        agent = self.agent_selection if self.agents else self.possible_agents[0]
        text = self.state_text(agent)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass

    # --- AEC bookkeeping shared by all games ------------------------------------------
    def _seed(self, seed: int | None) -> None:
        """Seed `np_random` for this episode (None: the generator runs on); it is built on first
        use, so a game without chance never pays for building it."""
        if seed is not None:
            self._np_random, self._np_seed = None, seed

    @property
    def np_random(self) -> np.random.Generator:
        """The env's generator: gymnasium's `seeding.np_random` of the last seed given to `reset`."""
        if getattr(self, "_np_random", None) is None:
            self._np_random, _ = seeding.np_random(getattr(self, "_np_seed", None))
        return self._np_random

    @np_random.setter
    def np_random(self, rng: np.random.Generator) -> None:
        self._np_random = rng

    def _start_episode(self) -> None:
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}

    def _over(self, agent: str) -> bool:
        """Has `agent`'s game ended (or is it no player of this episode)?"""
        return self.terminations.get(agent, True) or self.truncations.get(agent, True)

    def _end_episode(self, rewards: dict[str, float], truncated: bool = False) -> None:
        """Set this step's rewards and end the game for everyone."""
        for a in self.agents:
            self.rewards[a] = float(rewards.get(a, 0.0))
            if truncated:
                self.truncations[a] = True
            else:
                self.terminations[a] = True

    def forfeit(self, agent: str) -> None:
        """End the game as if `agent` made an illegal move (the arena's forfeit fallback)."""
        self._cumulative_rewards[agent] = 0.0
        for a in self.agents:
            self.rewards[a] = 0.0
        self._illegal(agent, None)

    def _illegal(self, agent: str, action: Any) -> None:
        """PettingZoo-classic illegal-move handling: offender penalised, game over."""
        for a in self.agents:
            self.infos[a]["illegal_move"] = {"agent": agent, "action": _jsonable(action)}
        self._end_episode({agent: self.illegal_reward})
        self._accumulate_rewards()


def seat_groups(
    teams: dict[str, str], agents: list[str], order: tuple[str, ...] = ()
) -> tuple[tuple[int, ...], ...]:
    """The sides of a match as groups of seat indices, from a game's `teams` (agent -> team).

    Seats are indices into `agents` (the env's `possible_agents`); a team's seats are in seat
    order and teams in the order of `order` (a game's `TEAMS`), then of their first seat. ()
    when the game declares no teams or every team has one member (every seat then plays for
    itself).

    >>> seat_groups({"player_0": "red", "player_1": "blue", "player_2": "red"}, ["player_0", "player_1", "player_2"])
    ((0, 2), (1,))
    """
    if not teams:
        return ()
    groups: dict[str, list[int]] = {t: [] for t in order}
    for i, agent in enumerate(agents):
        groups.setdefault(teams.get(agent, agent), []).append(i)
    groups = {t: g for t, g in groups.items() if g}
    if all(len(g) == 1 for g in groups.values()):
        return ()
    return tuple(tuple(g) for g in groups.values())


def fold_message(text: str, max_chars: int) -> str:
    """A message as a game of several speakers keeps it: on one line (runs of whitespace,
    newlines included, become one space, so it cannot pass for a line of the history) and at
    most `max_chars` long."""
    return " ".join(text.split())[:max_chars]


def parse_message(reply: str, max_chars: int) -> str:
    """A free-text move: the reply minus any <think> block, trimmed to `max_chars`."""
    text = strip_thinking(reply).strip()
    if not text:
        raise ParseError("empty", "the message is empty")
    return text[:max_chars]


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    return x


@dataclass
class Event:
    """One thing that happened in a game, for history rendering."""

    player: int  # -1 for chance
    action: Any
    extra: dict = field(default_factory=dict)
