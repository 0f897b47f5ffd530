"""Repeated simultaneous-move games: the engine behind the iterated 2x2 games and public goods.

A repeated game is one stage game played round after round by the same players. Each
round every player picks a move without seeing the others' picks of that round; the
round resolves when the last player has picked, everyone is paid, and only then does the
round (all moves and payoffs) enter everyone's history. `prisoners_dilemma`, `stag_hunt`
and `chicken` are `MatrixGame`s (symmetric 2x2); `public_goods` subclasses `RepeatedGame`.

AEC protocol  players pick in seat order (`player_0` first) and the picks are buffered;
              nobody's observation or text shows a buffered pick. Rounds resolve only at
              the end of a cycle, so these games are parallelizable:
              `games.make_parallel(name)` gives the Parallel API.
Observation   `{"observation": float32[2 + n], "action_mask": int8[num_moves]}` with
              observation = [rounds played, own total payoff, last round's moves (own
              first, then the others in seat order; -1 before the first round)].
Rewards       each player's payoff, handed out when the round resolves; an episode's
              cumulative reward is the player's total payoff. Illegal action (outside the
              space, or `None`): offender `illegal_reward` (-1), others 0, game over.
Horizon       `rounds=10` fixed by default. `random_horizon="geometric"`: after every round
              the game goes on with probability `continuation` (default 1 - 1/rounds, so
              `rounds` on average; hard cap `max_rounds`, default 5 x rounds).
              `random_horizon="uniform"`: the length is uniform on
              [`min_rounds`, `max_rounds`] (default rounds/2 .. 3 rounds/2). The length is
              drawn at `reset` from the env's seeded `np_random`; players are told only the
              rule, never the drawn length (a known end invites backward induction).
State text    round, totals (yours first, then the others in seat order) and, with `state_rounds=k` (2x2 games, public goods), the last k rounds'
              lines: with `prompt: state` a short memory-k prompt at fixed positions.
              `state_progress=False` (with `state_rounds`) drops the round and the
              totals and counts the rounds back from now ("Last round: ..."): a strict
              memory-k prompt, the same text in every round with the same last k rounds.
Bots          `round_moves(agent)`, `cooperation_history(agent)` and
              `social_action(agent, cooperate)` are what `agents.social_bots` reads; the
              same per-round data is in `infos[agent]["last_round"]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from games.text_env import TextEnv

HORIZON_KINDS = (None, "geometric", "uniform")


def int_action(action: Any, n: int) -> int | None:
    """`action` as an int in [0, n), or None when it is not one (then it is illegal)."""
    if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
        return None
    return int(action) if 0 <= action < n else None


@dataclass(frozen=True)
class Horizon:
    """How many rounds a repeated game lasts, and what the players are told about it."""

    rounds: int = 10  # the fixed length, or the mean length of a random one
    kind: str | None = None  # None (fixed) | "geometric" | "uniform"
    continuation: float = 0.0  # geometric: probability the game goes on after a round
    min_rounds: int = 1  # uniform: shortest length
    max_rounds: int = 0  # uniform: longest length; geometric: hard cap

    def draw(self, rng: np.random.Generator) -> int:
        if self.kind == "geometric":
            return int(min(rng.geometric(1.0 - self.continuation), self.max_rounds))
        if self.kind == "uniform":
            return int(rng.integers(self.min_rounds, self.max_rounds + 1))
        return self.rounds

    def text(self) -> str:
        if self.kind == "geometric":
            return (
                f"The number of rounds is random: after each round the game continues with probability "
                f"{self.continuation:g} (about {1 / (1 - self.continuation):.3g} rounds on average, at most "
                f"{self.max_rounds}). You are not told in advance which round is the last."
            )
        if self.kind == "uniform":
            return (
                f"The number of rounds is random, between {self.min_rounds} and {self.max_rounds} (each length "
                "equally likely). You are not told in advance which round is the last."
            )
        return f"The game lasts exactly {self.rounds} rounds."

    def round_text(self, k: int) -> str:
        """'Round k of N' or, for a random horizon, just 'Round k'."""
        return f"Round {k}" + (f" of {self.rounds}" if self.kind is None else "")


def rounds_ago(k: int) -> str:
    """How a state text names the round k rounds before now: "Last round", "2 rounds ago"."""
    return "Last round" if k == 1 else f"{k} rounds ago"


def check_state_text(state_rounds: Any, state_progress: Any) -> None:
    """ValueError unless `state_rounds` (the last rounds repeated in the state text) is an
    integer >= 0 and `state_progress` (round number and totals in it) a bool, not False with
    no rounds (the state text would name no past)."""
    if not isinstance(state_rounds, (int, np.integer)) or state_rounds < 0:
        raise ValueError(f"state_rounds must be a non-negative integer, got {state_rounds!r}")
    if not isinstance(state_progress, (bool, np.bool_)):
        raise ValueError(f"state_progress must be true or false, got {state_progress!r}")
    if not state_progress and not state_rounds:
        raise ValueError(
            "state_progress=False needs state_rounds >= 1 (else the state text is empty)"
        )


def horizon(
    rounds: int = 10,
    random_horizon: str | None = None,
    continuation: float | None = None,
    min_rounds: int | None = None,
    max_rounds: int | None = None,
) -> Horizon:
    """Validate the horizon parameters of a repeated game (see the module docstring)."""
    if not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    rounds = int(rounds)
    if random_horizon not in HORIZON_KINDS:
        raise ValueError(f"random_horizon must be one of {HORIZON_KINDS}, got {random_horizon!r}")
    if random_horizon == "geometric":
        p = 1.0 - 1.0 / rounds if continuation is None else float(continuation)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"continuation must be in [0, 1), got {continuation!r}")
        cap = 5 * rounds if max_rounds is None else int(max_rounds)
        if cap < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds!r}")
        return Horizon(rounds, "geometric", continuation=p, max_rounds=cap)
    if random_horizon == "uniform":
        lo = max(1, rounds // 2) if min_rounds is None else int(min_rounds)
        hi = rounds + rounds // 2 if max_rounds is None else int(max_rounds)
        if not 1 <= lo <= hi:
            raise ValueError(f"need 1 <= min_rounds <= max_rounds, got {lo} and {hi}")
        return Horizon(rounds, "uniform", min_rounds=lo, max_rounds=hi)
    if continuation is not None or min_rounds is not None or max_rounds is not None:
        raise ValueError(
            "continuation/min_rounds/max_rounds need random_horizon='geometric' or 'uniform'"
        )
    return Horizon(rounds)


class RepeatedGame(TextEnv):
    """n players, `num_moves` moves each, one simultaneous stage game per round.

    Subclasses give `payoffs(joint)`, `move_text`, `game_rules(agent)`,
    `describe_round(agent, joint, payoffs)` and the social mapping (`cooperate_action`,
    `defect_action`, `is_cooperative`).
    """

    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "repeated_game",
        "is_parallelizable": True,
    }
    cooperate_action: int = 0
    defect_action: int = 1

    def __init__(
        self,
        num_players: int,
        num_moves: int,
        horizon: Horizon,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        self.num_players = num_players
        self.num_moves = num_moves
        self.horizon = horizon
        self.possible_agents = [f"player_{i}" for i in range(num_players)]
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (2 + num_players,), np.float32),
                "action_mask": spaces.Box(0, 1, (num_moves,), np.int8),
            }
        )
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(num_moves) for a in self.possible_agents}
        self.rounds: list[
            tuple[tuple[int, ...], tuple[float, ...]]
        ] = []  # (joint moves, payoffs) per round
        self.num_rounds = 0  # the drawn horizon of this episode (never shown to players)
        self._buffer: dict[int, int] = {}  # seat -> move picked this round, not yet resolved
        self._totals = [0.0] * num_players
        self.state_rounds = (
            0  # the last rounds repeated in the state text (MatrixGame's `state_rounds`)
        )
        self.state_progress = True  # the round number and the totals in the state text

    # --- stage game (subclasses) -----------------------------------------------------
    def payoffs(self, joint: tuple[int, ...]) -> tuple[float, ...]:
        raise NotImplementedError

    def game_rules(self, agent: str) -> str:
        raise NotImplementedError

    def describe_round(self, agent: str, joint: tuple[int, ...], payoffs: tuple[float, ...]) -> str:
        raise NotImplementedError

    def is_cooperative(self, action: int) -> bool:
        return action == self.cooperate_action

    def observer_first(self, agent: str) -> list[int]:
        """The seats with `agent`'s first, then the others in seat order: "you" never moves between seats."""
        i = self._index[agent]
        return [i] + [p for p in range(self.num_players) if p != i]

    def other(self, agent: str, p: int) -> str:
        """How `agent` is told about player `p`: 'you', 'the other player' or 'player_p'."""
        if self.possible_agents[p] == agent:
            return "you"
        return "the other player" if self.num_players == 2 else self.possible_agents[p]

    # --- AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        self.num_rounds = self.horizon.draw(self.np_random)
        self.rounds = []
        self._buffer = {}
        self._totals = [0.0] * self.num_players
        self._start_episode()
        self.agent_selection = self.possible_agents[0]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        move = int_action(action, self.num_moves)
        if move is None:
            return self._illegal(agent, action)
        i = self._index[agent]
        self._buffer[i] = move
        if len(self._buffer) < self.num_players:
            self.agent_selection = self.possible_agents[i + 1]
            return
        joint = tuple(self._buffer[p] for p in range(self.num_players))
        self._buffer = {}
        pay = tuple(float(x) for x in self.payoffs(joint))
        self.rounds.append((joint, pay))
        for p, a in enumerate(self.possible_agents):
            self.rewards[a] = pay[p]
            self._totals[p] += pay[p]
            self.infos[a]["last_round"] = {
                "round": len(self.rounds),
                "moves": list(joint),
                "payoffs": list(pay),
            }
        if len(self.rounds) >= self.num_rounds:
            for a in self.agents:
                self.terminations[a] = True
        self.agent_selection = self.possible_agents[0]
        self._accumulate_rewards()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        i = self._index[agent]
        last = self.rounds[-1][0] if self.rounds else (-1,) * self.num_players
        obs = np.array(
            [len(self.rounds), self._totals[i], *(last[p] for p in self.observer_first(agent))],
            np.float32,
        )
        mask = np.zeros(self.num_moves, np.int8)
        mask[self.legal_actions(agent)] = 1
        return {"observation": obs, "action_mask": mask}

    def legal_actions(self, agent: str | None = None) -> list[int]:
        agent = agent or self.agent_selection
        if self.terminations.get(agent, True) or self.truncations.get(agent, True):
            return []
        return [] if self._index[agent] in self._buffer else list(range(self.num_moves))

    # --- what scripted bots read -----------------------------------------------------
    def round_moves(self, agent: str) -> list[tuple[int, tuple[int, ...]]]:
        """Per resolved round: (this player's move, the other players' moves in seat order)."""
        i = self._index[agent]
        return [(j[i], tuple(m for p, m in enumerate(j) if p != i)) for j, _ in self.rounds]

    def cooperation_history(self, agent: str) -> list[tuple[bool, tuple[bool, ...]]]:
        """Per resolved round: did this player cooperate, and did each other player."""
        return [
            (self.is_cooperative(mine), tuple(self.is_cooperative(m) for m in others))
            for mine, others in self.round_moves(agent)
        ]

    def social_action(self, agent: str, cooperate: bool) -> int:
        """The move that means 'cooperate' (or 'defect') for this player now."""
        return self.cooperate_action if cooperate else self.defect_action

    # --- text layer --------------------------------------------------------------------
    def rules_text(self, agent: str) -> str:
        return (
            f"{self.game_rules(agent)}\n{self.horizon.text()}\n"
            "Your goal: as many points as possible in total over all rounds."
        )

    def state_text(self, agent: str) -> str:
        i = self._index[agent]
        totals = "; ".join(
            f"{self.other(agent, p)}: {self._totals[p]:g}" for p in self.observer_first(agent)
        )
        if self.terminations.get(agent, True) or self.truncations.get(agent, True):
            if "illegal_move" in self.infos.get(agent, {}):
                return f"The game ended early after an illegal move. Points from play: {totals}."
            return f"The game is over after {len(self.rounds)} rounds. Total points: {totals}."
        recent = (
            self.history_text(agent)[-self.state_rounds :]
            if self.state_rounds and self.rounds
            else []
        )
        if self.state_progress:
            text = (
                f"{self.horizon.round_text(len(self.rounds) + 1)}. Total points so far: {totals}."
            )
            lines = [text, *recent]
        else:  # the last rounds alone, counted back from now: no round number, no totals
            n = len(recent)
            lines = [
                f"{rounds_ago(n - j)}: {self.describe_round(agent, *r)}"
                for j, r in enumerate(self.rounds[len(self.rounds) - n :])
            ]
        text = "\n".join(lines)
        if i in self._buffer:
            return (
                text
                + ("\n" if text else "")
                + f"You chose {self.move_text(agent, self._buffer[i])} this round; waiting for the others."
            )
        return text + ("\n" if text else "") + "Choose your move for this round."

    def history_text(self, agent: str) -> list[str]:
        return [
            f"Round {k}: {self.describe_round(agent, joint, pay)}"
            for k, (joint, pay) in enumerate(self.rounds, 1)
        ]


class MatrixGame(RepeatedGame):
    """A symmetric 2x2 game played repeatedly; move 0 is the 'nice' one, move 1 the 'nasty'.

    Payoffs (row player first): both nice R,R; nice vs nasty S,T; nasty vs nice T,S;
    both nasty P,P.
    """

    def __init__(
        self,
        name: str,
        moves: tuple[str, str],
        story: str,
        R: float,
        S: float,
        T: float,
        P: float,
        rounds: int = 10,
        random_horizon: str | None = None,
        continuation: float | None = None,
        min_rounds: int | None = None,
        max_rounds: int | None = None,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
        state_rounds: int = 0,
        state_progress: bool = True,
    ):
        for key, value in (("R", R), ("S", S), ("T", T), ("P", P)):
            if not isinstance(value, (int, float, np.integer, np.floating)) or not np.isfinite(
                value
            ):
                raise ValueError(f"payoff {key} must be a finite number, got {value!r}")
        check_state_text(state_rounds, state_progress)
        super().__init__(
            2,
            2,
            horizon(rounds, random_horizon, continuation, min_rounds, max_rounds),
            render_mode,
            illegal_reward,
        )
        self.metadata = {**self.metadata, "name": name}
        self.state_rounds = int(state_rounds)
        self.state_progress = bool(state_progress)
        self.moves = tuple(moves)
        self.story = story
        self.R, self.S, self.T, self.P = float(R), float(S), float(T), float(P)
        self._table = {
            (0, 0): (self.R, self.R),
            (0, 1): (self.S, self.T),
            (1, 0): (self.T, self.S),
            (1, 1): (self.P, self.P),
        }

    def payoffs(self, joint: tuple[int, ...]) -> tuple[float, ...]:
        return self._table[joint]

    def move_text(self, agent: str, action: int) -> str:
        return self.moves[int(action)]

    def game_rules(self, agent: str) -> str:
        nice, nasty = self.moves
        return (
            f"{self.story}\n"
            f"Each round you and the other player choose simultaneously between {nice} and {nasty}; you see the "
            "other player's choice only after the round.\n"
            "Points per round:\n"
            f"  both {nice}: {self.R:g} each\n"
            f"  you play {nice}, the other plays {nasty}: you {self.S:g}, the other {self.T:g}\n"
            f"  you play {nasty}, the other plays {nice}: you {self.T:g}, the other {self.S:g}\n"
            f"  both {nasty}: {self.P:g} each\n"
            f"Answer with your move: [{nice}] or [{nasty}]."
        )

    def describe_round(self, agent: str, joint: tuple[int, ...], payoffs: tuple[float, ...]) -> str:
        i = self._index[agent]
        return (
            f"you {self.moves[joint[i]]}, the other player {self.moves[joint[1 - i]]} -> "
            f"you {payoffs[i]:g} points, the other player {payoffs[1 - i]:g}"
        )
