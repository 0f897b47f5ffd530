"""Any OpenSpiel game as a PettingZoo AEC text game: `games.make("openspiel:<game>")`.

Rules, chance and returns are OpenSpiel's (`pyspiel`); this module adds the AEC protocol
and a generic text layer built from OpenSpiel's own strings. Catalogue games
(`games/tic_tac_toe.py`, ...) subclass it to write their own prompts.

Agents      `player_0` .. `player_{n-1}`, OpenSpiel player ids in order.
Actions     `Discrete(num_distinct_actions)`; action ids equal OpenSpiel's.
Observation `{"observation": float32 vector, "action_mask": int8 vector}`; the vector is
            OpenSpiel's observation tensor for that player (else its information-state
            tensor, else a single 0).
Rewards     each step hands out what `state.returns()` gained since the previous step, so
            a player's rewards summed over the episode equal `state.returns()` exactly
            (Shimmy's wrapper double-counts the second player's final reward; we don't).
Chance      sampled from `chance_outcomes()` with the env's seeded `np_random`; a recorded
            match is replayed with `reset(options={"chance": [outcome, ...]})`, which plays
            those outcomes in order instead (then samples again once they run out).
Simultaneous games are played in AEC turn order with actions buffered until every player
            has chosen, then applied together (`apply_actions`); nobody sees a buffered
            action. Such games also have a Parallel API (`games.make_parallel`).
Illegal     an action outside the mask: offender gets `illegal_reward` (-1), others 0,
            the game ends (PettingZoo classic); `infos[agent]["illegal_move"]` says who.
State text  OpenSpiel's observation string for the player; with the parameter
            `state_text: information_state`, its information-state string (`STATE_TEXTS`).

Text is built only when asked for (`view`, `state_text`, `history_text`, ...), so random
play pays only for OpenSpiel's C++ step and the observation tensor.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import pyspiel
from gymnasium import spaces

from games.text_env import GameInfo, TextEnv

STATE_TEXTS = ("observation", "information_state")
"""What a player's state text is (the env's `state_text` parameter): OpenSpiel's observation string
(the default; in some games it forgets the past: 3-player Kuhn's shows the card and the pot, not
who passed) or its information-state string (everything the player knows, the moves it saw
included: one text per information state)."""


def load_game(game: str | pyspiel.Game, params: dict | None = None) -> pyspiel.Game:
    if isinstance(game, pyspiel.Game):
        return game
    if game not in pyspiel.registered_names():
        close = difflib.get_close_matches(game, pyspiel.registered_names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown OpenSpiel game {game!r}{hint}")
    try:
        return pyspiel.load_game(game, dict(params or {}))
    except (pyspiel.SpielError, TypeError) as e:
        raise ValueError(f"cannot load OpenSpiel game {game!r} with {params}: {e}") from None


def openspiel_info(game_name: str, **params) -> GameInfo:
    game = load_game(game_name, params)
    t = game.get_type()
    perfect = t.information == pyspiel.GameType.Information.PERFECT_INFORMATION
    utility = {
        pyspiel.GameType.Utility.ZERO_SUM: "competitive",
        pyspiel.GameType.Utility.CONSTANT_SUM: "competitive",
        pyspiel.GameType.Utility.IDENTICAL: "cooperative",
    }.get(t.utility, "general_sum")
    simultaneous = t.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
    return GameInfo(
        name=f"openspiel:{game_name}",
        num_players=game.num_players(),
        information="perfect" if perfect else "imperfect",
        kind=utility,
        dynamics="simultaneous" if simultaneous else "sequential",
        split="extra",
        source="openspiel",
        description=t.long_name,
    )


class OpenSpielEnv(TextEnv):
    """A PettingZoo AEC env over one OpenSpiel game (see the module docstring)."""

    metadata = {"render_modes": ["human", "ansi"], "name": "openspiel", "is_parallelizable": False}
    static_move_text = False
    """`move_text` depends on the action alone (not the agent, not the state): `legal_pairs`
    then makes each action's text once per env, not once per state."""

    def __init__(
        self,
        game: str | pyspiel.Game,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
        state_text: str = "observation",
        **params,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        if state_text not in STATE_TEXTS:
            raise ValueError(
                f"state_text must be one of {', '.join(STATE_TEXTS)}, got {state_text!r}"
            )
        self.state_text_source = state_text
        self.game = load_game(game, params)
        gtype = self.game.get_type()
        if gtype.dynamics not in (
            pyspiel.GameType.Dynamics.SEQUENTIAL,
            pyspiel.GameType.Dynamics.SIMULTANEOUS,
        ):
            raise ValueError(
                f"{gtype.short_name}: only sequential and simultaneous OpenSpiel games are supported"
            )
        self.game_name = gtype.short_name
        self.params = dict(params)
        self.simultaneous = gtype.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
        self.perfect_information = (
            gtype.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        )
        self._intermediate_rewards = gtype.reward_model == pyspiel.GameType.RewardModel.REWARDS
        self.metadata = {
            **self.metadata,
            "name": self.game_name,
            "is_parallelizable": self.simultaneous,
        }
        if getattr(type(self), "info", None) is None:
            self.info = openspiel_info(self.game_name, **params)

        n = self.game.num_players()
        self.possible_agents = [f"player_{i}" for i in range(n)]
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self.num_actions = self.game.num_distinct_actions()
        if gtype.provides_observation_tensor:
            self._tensor, shape = "observation", self.game.observation_tensor_shape()
        elif gtype.provides_information_state_tensor:
            self._tensor, shape = "information_state", self.game.information_state_tensor_shape()
        else:
            self._tensor, shape = None, [1]
        self._obs_size = int(np.prod(shape))
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (self._obs_size,), np.float32),
                "action_mask": spaces.Box(0, 1, (self.num_actions,), np.int8),
            }
        )
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(self.num_actions) for a in self.possible_agents}
        self.state: pyspiel.State | None = None
        self.moves: list[tuple[int, Any]] = []  # (player or -1 for chance, action or joint list)
        self._legal: dict[int, list[int]] = {}  # player -> pyspiel's legal actions at `state`
        # `state.current_player()`, read once per state
        self._current = int(pyspiel.PlayerId.INVALID)
        self._texts: dict[int, str] = {}  # action -> move text, with `static_move_text`
        self._pairs: dict[str, tuple[list[int], list[str]]] = {}  # agent -> its legal_pairs

    # --- AEC protocol ---------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """New episode. `options={"history": [action, ...]}` starts it at the state after
        that OpenSpiel action history instead (chance outcomes included, sequential games
        only): the position exactly as the players would have reached it, e.g. to ask an
        agent for its move at every information state (`evaluation.exploitability`).
        `options={"chance": [outcome, ...]}` plays these chance outcomes (OpenSpiel action
        ids), in order, at the chance nodes that follow instead of sampling: a recorded
        match (e.g. an OpenSpiel trajectory) replays with its own deals."""
        self._seed(seed)
        self.state = self.game.new_initial_state()
        self.moves = []
        self._chance = [int(a) for a in (options or {}).get("chance", [])][::-1]
        self._buffer: dict[int, int] = {}
        self._paid = [0.0] * len(self.possible_agents)
        self._start_episode()
        for action in (options or {}).get("history", []):
            if self.state.is_terminal() or self.state.is_simultaneous_node():
                raise ValueError(
                    f"{self.game_name}: history {options['history']} goes past the end or through a simultaneous move"
                )
            player = self.state.current_player()
            if int(action) not in self.state.legal_actions():
                raise ValueError(
                    f"{self.game_name}: action {action} is not legal after {self.state.history()}"
                )
            self.state.apply_action(int(action))
            self.moves.append((-1 if player == pyspiel.PlayerId.CHANCE else player, int(action)))
        self._advance()

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        rewards = self.rewards
        for a in self.agents:
            rewards[a] = 0.0
        player = self._index[agent]
        if action is None or not self._is_legal(player, action):
            return self._illegal(agent, action)
        action = int(action)
        if self.simultaneous and self.state.is_simultaneous_node():
            self._buffer[player] = action
            self._pairs = {}  # the buffered player has no move left this round
            if len(self._buffer) < len(self._to_move):
                self.agent_selection = self.possible_agents[self._to_move[len(self._buffer)]]
                return
            joint = [self._buffer.get(p, 0) for p in range(len(self.possible_agents))]
            self.state.apply_actions(joint)
            self.moves.append((-2, joint))
            self._buffer = {}
        else:
            self.state.apply_action(action)
            self.moves.append((player, action))
        self._advance()

    def _advance(self) -> None:
        """Play chance, hand out rewards, pick the next agent or end the game."""
        state = self.state
        self._legal, self._pairs = {}, {}  # every change of `state` (reset, a move) comes here
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes())
            if self._chance:  # a recorded match replayed: its own chance outcome
                outcome = self._chance.pop()
                if outcome not in outcomes:
                    raise ValueError(
                        f"{self.game_name}: chance outcome {outcome} is not possible after {state.history()}"
                    )
            else:
                outcome = outcomes[self.np_random.choice(len(outcomes), p=probs)]
            state.apply_action(outcome)
            self.moves.append((-1, outcome))
        terminal = state.is_terminal()
        self._current = state.current_player()
        if terminal or self._intermediate_rewards:
            returns = state.returns()
            for i, a in enumerate(self.possible_agents):
                self.rewards[a] = returns[i] - self._paid[i]
                self._paid[i] = returns[i]
        if terminal:
            for a in self.agents:
                self.terminations[a] = True
        elif self.simultaneous and state.is_simultaneous_node():
            self._to_move = [p for p in range(len(self.possible_agents)) if state.legal_actions(p)]
            self.agent_selection = self.possible_agents[self._to_move[0]]
        else:
            self.agent_selection = self.possible_agents[self._current]
        self._accumulate_rewards()

    @property
    def simultaneous_node(self) -> bool:
        return self.simultaneous and self.state.is_simultaneous_node()

    def _is_legal(self, player: int, action: Any) -> bool:
        try:
            return int(action) in self._state_legal(player)
        except (TypeError, ValueError):
            return False

    def _state_legal(self, player: int) -> list[int]:
        """pyspiel's legal actions of `player` at the current state, asked once per state (the
        mask, the view, the parser and the step all read them). Do not modify the list."""
        legal = self._legal.get(player)
        if legal is None:
            legal = self._legal[player] = self.state.legal_actions(player)
        return legal

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        player = self._index[agent]
        state = self.state
        if self._tensor is None:
            obs = np.zeros(1, np.float32)
        else:
            try:
                tensor = (
                    state.observation_tensor(player)
                    if self._tensor == "observation"
                    else state.information_state_tensor(player)
                )
                obs = np.asarray(tensor, dtype=np.float32)
            except pyspiel.SpielError:  # some games have no tensor at terminal states
                obs = np.zeros(self._obs_size, np.float32)
        mask = np.zeros(self.num_actions, np.int8)
        if not self.terminations.get(agent, True) and not self.truncations.get(agent, True):
            legal = self._legal_of(agent)
            if legal:
                mask[legal] = 1
        return {"observation": obs, "action_mask": mask}

    # --- text layer: generic, from OpenSpiel's strings -------------------------------
    def legal_actions(self, agent: str | None = None) -> list[int]:
        return list(self._legal_of(agent or self.agent_selection))

    def legal_pairs(self, agent: str) -> tuple[list[int], list[str]]:
        """`TextEnv.legal_pairs`, made once per state and agent: the cache is emptied whenever
        the state, a termination or the simultaneous-move buffer changes."""
        pairs = self._pairs.get(agent)
        if pairs is None:
            actions = self._legal_of(agent)
            if self.static_move_text:
                known = self._texts.get
                moves = [known(a) or self._text_of(agent, a) for a in actions]
            else:
                moves = [self.move_text(agent, a) for a in actions]
            pairs = self._pairs[agent] = (actions, moves)
        return pairs

    def _text_of(self, agent: str, action: int) -> str:
        """`move_text`, kept for the next state (with `static_move_text`)."""
        text = self._texts[action] = self.move_text(agent, action)
        return text

    def _illegal(self, agent: str, action: Any) -> None:
        self._pairs = {}  # the game ends without a change of state
        super()._illegal(agent, action)

    def _was_dead_step(self, action: Any) -> None:
        self._pairs = {}
        super()._was_dead_step(action)

    def _legal_of(self, agent: str) -> list[int]:
        """`legal_actions(agent)`, possibly the cached list itself (not to be modified)."""
        if self.terminations.get(agent) or self.truncations.get(agent):
            return []
        state, player = self.state, self._index[agent]
        if self.simultaneous and state.is_simultaneous_node():
            return [] if player in self._buffer else self._state_legal(player)
        # a terminal state's current player is OpenSpiel's terminal id, never a player's
        return self._state_legal(player) if self._current == player else []

    def move_text(self, agent: str, action: int) -> str:
        return self.state.action_to_string(self._index[agent], int(action))

    def rules_text(self, agent: str) -> str:
        t = self.game.get_type()
        params = (
            ", ".join(f"{k}={v}" for k, v in sorted(self.game.get_parameters().items()))
            or "defaults"
        )
        order = "simultaneously each round" if self.simultaneous else "in turns"
        return (
            f"You are {agent} ({self._index[agent] + 1} of {self.game.num_players()}) in the OpenSpiel game "
            f"'{t.long_name}' ({params}). Players move {order}. Your goal is the highest final return. "
            "Each turn you are shown the state as you can see it and your legal moves; answer with exactly one legal move."
        )

    def state_text(self, agent: str) -> str:
        player, state, t = self._index[agent], self.state, self.game.get_type()
        if self.state_text_source == "information_state" and t.provides_information_state_string:
            text = state.information_state_string(player)
        elif t.provides_observation_string:
            text = state.observation_string(player)
        elif t.provides_information_state_string:
            text = state.information_state_string(player)
        elif self.perfect_information:
            text = str(state)
        else:
            text = "(this game shows no state text)"
        if state.is_terminal():
            text += f"\nThe game is over. Returns: {', '.join(f'{r:g}' for r in state.returns())}"
        return text

    def history_text(self, agent: str) -> list[str]:
        """One line per move this player has seen. Without perfect information only the
        player's own moves are listed; what it may know of others is in `state_text`."""
        me = self._index[agent]
        lines, replay = [], self.game.new_initial_state()
        for player, action in self.moves:
            if player == -1:
                if self.perfect_information:
                    lines.append(
                        f"chance: {replay.action_to_string(pyspiel.PlayerId.CHANCE, action)}"
                    )
                replay.apply_action(action)
            elif player == -2:
                shown = [replay.action_to_string(p, a) for p, a in enumerate(action)]
                if self.perfect_information:
                    lines.append(
                        "; ".join(f"{self.possible_agents[p]}: {s}" for p, s in enumerate(shown))
                    )
                else:
                    lines.append(f"you ({agent}): {shown[me]}")
                replay.apply_actions(action)
            else:
                if self.perfect_information or player == me:
                    who = f"you ({agent})" if player == me else self.possible_agents[player]
                    lines.append(f"{who}: {replay.action_to_string(player, action)}")
                replay.apply_action(action)
        return lines
