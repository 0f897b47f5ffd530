"""The Gymnasium view of a game: one seat is yours, agent specs play the others.

`single_agent(name, seat=0, opponents="random", **params)` returns a `gymnasium.Env` in
which the caller plays one seat of a catalogue game and the other seats are played by agent
specs (`agents.make_agent`: "random", "cfr", "mcts:100", "werewolf_heuristic",
"llm:PATH", ...), exactly as `arena play` would play them. It is `arena.single_agent`,
not `games.single_agent`: building the opponents needs `agents`, and the import layers run
core <- games <- agents <- arena.

>>> import arena
>>> env = arena.single_agent("tic_tac_toe", seat=0, opponents="random")
>>> obs, info = env.reset(seed=0)
>>> print(obs["text"])  # doctest: +SKIP
>>> obs, reward, terminated, truncated, info = env.step(4)  # the centre; or env.step("4")

Observation: a `spaces.Dict` with

- `"text"`: the seat's prompt (`TextView.prompt()`: rules, history, state, legal moves),
  a `spaces.Text` of any characters (`AnyText`) up to `max_text` characters;
- `"action_mask"`: the game's mask of legal action ids (all zero at a free-text turn);
- `"observation"`: the game's numeric observation.

`info` carries `"seat"` (the seat to move), `"legal_moves"` (the move strings, aligned with
`"legal_actions"`), `"free_text"` (the seat must write a message: step with a string), and
the view's parts `"rules"`, `"state"` and `"history"` (what an LLM agent's `prompt: state` or
`compact` takes).

Action: a legal action id (an `int` in the `spaces.Discrete` action space; use the mask),
or a reply string, turned into one action by the game's own parser (`env.parse`), which is
what a free-text (message) turn needs and what an LLM policy writes. A reply the parser
rejects is handled by `on_bad_reply`:

- `"retry"` (default): nothing is played; the same observation comes back with reward 0
  and `info["parse_error"]` (the parser's message), and the seat moves again. The rejected
  replies are kept on the turn's record (`TurnRecord.attempts`, `retries`).
- `"forfeit"`: the seat forfeits as for an illegal move (`TextEnv.forfeit`: the game's
  `illegal_reward`, default -1, others 0) and the episode terminates, with
  `info["parse_error"]` set.

An action id outside the mask, or an id at a free-text turn, is an illegal move: the game's
own rule applies (PettingZoo classic: the offender gets `illegal_reward`, the game ends).

Reward: what the seat accrued from its move until its next decision (the opponents' moves
and chance included; what it accrued before its first decision comes with its first step),
so an episode's rewards sum to the seat's return in the match.
`terminated` is set when the game ends (when the seat drops out of a game that goes on,
werewolf's night kill, the others play it to the end and that last step carries the rest of
the seat's return); `truncated` after `max_turns` decisions of the match (all seats; the
`arena play --max-turns` rule). Should the game end before the seat's first decision, the
first step ends the episode whatever its action.

Several seats: `seat=[0, 2]` (a team, or every seat for self-play) gives the caller each of
those seats; a step acts for the one to move (`env.seat`, and `info["seat"]`), the observation
is that seat's, and the reward is the mean of what those seats accrued since the last step (a
team's reward when they are one team; `info["seat_rewards"]` has each seat's). In the records
they are `player_name`, `player_name#2`, ... in seat order: one player holding several seats,
as tournaments name a team played by one player.

Seeding: `reset(seed=s)` plays match `s` exactly as `arena.runner` would: the game reset
with `s`, and the opponents drawing from `np.random.default_rng([s, 1])`. The same seed
replays the same episode (the same chance events and opponent moves for the same actions);
`reset()` without a seed draws the next match's seed from the env's `np_random`. Each reset
builds a fresh game and ends the opponents' previous match (`Agent.end_match`), so nothing
carries over between episodes.

Records: with `record=PATH` every finished episode is appended to that JSONL file as a
`core.records.MatchRecord` (the caller's seat named `player_name`; an episode left unfinished
by a reset is not written), which `arena export trajectories`, `arena.summary` and the web
viewer read like any match; `env.last_record` is the last finished one.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import games
from agents import check_spec, make_agent, parse_spec
from agents.base import Agent, PendingTurn
from agents.by_game import build_agent, check_player
from arena.runner import (
    LiveMatch,
    MatchPlan,
    apply_action,
    finish_match,
    next_decision,
    start_match,
)
from core.records import Attempt, MatchRecord, TurnRecord, append_jsonl, check_jsonl_out
from games.parsing import ParseError
from games.text_env import TextView

BAD_REPLY = ("retry", "forfeit")


class AnyText(spaces.Text):
    """`spaces.Text` that holds any string of the allowed lengths, whatever its characters
    (a prompt quotes other players' messages verbatim); it samples printable ASCII."""

    def __init__(self, max_length: int, min_length: int = 0):
        super().__init__(max_length, min_length=min_length, charset=string.printable)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


def single_agent(
    name: str,
    seat: int | str | Sequence[int | str] = 0,
    opponents: str | dict | Sequence[str | dict] = "random",
    *,
    on_bad_reply: str = "retry",
    max_turns: int = 2000,
    max_text: int = 1 << 20,
    record: str | None = None,
    player_name: str = "gym",
    named: dict | None = None,
    render_mode: str | None = None,
    **params,
) -> SingleAgentEnv:
    """A `gymnasium.Env` of catalogue game `name` (see the module docstring).

    Args:
        name: a catalogue game (`games.names()`) or `openspiel:<game>`.
        seat: the seat the caller plays: an index (0 moves first) or an agent ("player_1");
            or a list of them: the caller plays each (see "Several seats").
        opponents: one agent spec for every other seat, or a sequence of specs, one per
            other seat in seat order (none when the caller holds every seat).
        on_bad_reply: "retry" or "forfeit": what a reply the parser rejects does.
        max_turns: decisions of the match (all seats) after which the episode is truncated.
        max_text: the longest prompt the observation space holds.
        record: a JSONL path each finished episode is appended to as a `MatchRecord`.
        player_name: the caller's name in the records (`MatchRecord.seats`).
        named: named agents (a tournament's players: name -> agent spec, `{by_game: ...}`
            included): an opponent that is one of these names is that player, so named in
            the records.
        render_mode: None, or "ansi": `render()` returns the seat's prompt.
        **params: game parameters (`games.make`).

    Raises:
        ValueError: (one line) a bad seat, opponent spec, on_bad_reply or record path.
    """
    return SingleAgentEnv(
        name,
        seat,
        opponents,
        on_bad_reply,
        max_turns,
        max_text,
        record,
        player_name,
        params,
        render_mode,
        named or {},
    )


class SingleAgentEnv(gym.Env):
    """One seat of a game as a Gymnasium env; build it with `single_agent`."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        game: str,
        seat: int | str | Sequence[int | str],
        opponents: str | dict | Sequence[str | dict],
        on_bad_reply: str,
        max_turns: int,
        max_text: int,
        record: str | None,
        player_name: str,
        params: dict,
        render_mode: str | None = None,
        named: dict | None = None,
    ):
        if on_bad_reply not in BAD_REPLY:
            raise ValueError(
                f"on_bad_reply must be one of {', '.join(BAD_REPLY)}, got {on_bad_reply!r}"
            )
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if record:
            check_jsonl_out(record)
        self.game, self.params = game, dict(params)
        probe = games.make(game, **self.params)
        players = list(probe.possible_agents)
        self.players = players  # the env's agents, in seat order
        self.mine = _seat_agents_of(seat, players)  # the caller's seats, in seat order
        self.seat = self.mine[0]  # the caller's seat to move (the last one to, once over)
        self.on_bad_reply, self.max_turns, self.record_path = on_bad_reply, max_turns, record
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be None or ansi, got {render_mode!r}")
        self.render_mode = render_mode
        mine = [players.index(a) for a in self.mine]
        self.seats, self.opponents = _seat_agents(
            game, self.params, mine, len(players), opponents, player_name, named or {}
        )
        self.observation_space = spaces.Dict(
            {"text": AnyText(max_text), **probe.observation_space(self.seat).spaces}
        )
        self.action_space = probe.action_space(self.seat)
        if any(
            probe.action_space(a) != self.action_space
            or probe.observation_space(a) != probe.observation_space(self.seat)
            for a in self.mine
        ):
            raise ValueError(f"the seats {', '.join(self.mine)} of {game} have different spaces")
        self.match: LiveMatch | None = None
        self.last_record: MatchRecord | None = None  # the last finished episode
        self.episode = 0
        self._attempts: list[Attempt] = []
        self._open = False  # the match is under way: its opponents hold per-match state
        self._paid = dict.fromkeys(self.mine, 0.0)  # each seat's return handed out so far

    # --- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        self._end_match()
        match_id = f"{self.seats[self.players.index(self.mine[0])]}-{seed}-{self.episode:05d}"
        self.episode += 1
        self.match = start_match(
            MatchPlan(match_id, self.game, list(self.seats), seed, self.params)
        )
        self._attempts, self._open = [], True
        self._paid, self.seat = dict.fromkeys(self.mine, 0.0), self.mine[0]
        self._advance()
        return self._observation(), self._info()

    def step(self, action: int | str):
        m = self._live()
        info: dict[str, Any] = {}
        if self._to_move():
            turn = self._turn(action, info)
            if turn is None:  # a rejected reply, retried
                return self._observation(), 0.0, False, False, {**self._info(), **info}
            apply_action(m, self.seat, self.seats[self.players.index(self.seat)], turn)
            self._advance()
        rewards = {a: float(m.returns[a] - self._paid[a]) for a in self.mine}
        self._paid = {a: float(m.returns[a]) for a in self.mine}
        reward = sum(rewards.values()) / len(rewards)
        if len(self.mine) > 1:
            info["seat_rewards"] = rewards
        over = not self._to_move()
        truncated = over and m.record.error is not None
        if over:
            self._finish_match()
        obs, info = self._observation(), {**self._info(), **info}
        return obs, reward, over and not truncated, truncated, info

    def render(self) -> str | None:
        """The seat's prompt (render_mode "ansi")."""
        if self.render_mode != "ansi" or self.match is None:
            return None
        return self._text()

    def close(self) -> None:
        self._end_match()

    # --- one episode --------------------------------------------------------------------
    def _live(self) -> LiveMatch:
        if self.match is None:
            raise RuntimeError("call reset() before step()")
        return self.match

    def _advance(self) -> None:
        """Let the opponents move until one of the caller's seats is to move (it becomes
        `self.seat`) or the match is over; a seat that is out of a game that goes on watches
        it to the end."""
        m = self.match
        while (player := next_decision(m, self.max_turns)) is not None:
            if player in self.mine:  # live: next_decision steps a seat that is out out
                self.seat = player
                return
            name = m.plan.seats[m.env.possible_agents.index(player)]
            (rec,) = self.opponents[name].act([PendingTurn(m.plan.match_id, m.env, player, m.rng)])
            apply_action(m, player, name, rec)

    def _seat_out(self, agent: str) -> bool:
        env = self.match.env
        return agent not in env.agents or env.terminations[agent] or env.truncations[agent]

    def _to_move(self) -> bool:
        """True when one of the caller's seats is to move; False once the match is over."""
        m = self.match
        if not m.env.agents or m.record.error is not None:
            return False
        agent = m.env.agent_selection
        return agent in self.mine and not self._seat_out(agent)

    def _turn(self, action: int | str, info: dict) -> TurnRecord | None:
        """The seat's turn for `action` (its action None: a forfeit, `arena.runner.apply_action`);
        None when a rejected reply is to be retried."""
        env, agent = self.match.env, self.seat
        if isinstance(action, str):
            try:
                act = env.parse(agent, action)
                self._attempts.append(Attempt(action))
            except ParseError as e:
                info["parse_error"] = str(e)
                self._attempts.append(Attempt(action, error=str(e)))
                if self.on_bad_reply == "retry":
                    return None
                act = None
            move = action
        else:
            legal = [] if env.is_free_text(agent) else env.legal_actions(agent)
            act = int(action) if int(action) in legal else None  # illegal: the game's rule
            move = env.move_text(agent, act) if act is not None else str(action)
        rec = TurnRecord(0, agent, "", move, act, valid=act is not None)
        rec.completion = action if isinstance(action, str) else ""
        rec.attempts, rec.retries = self._attempts, max(0, len(self._attempts) - 1)
        self._attempts = []
        return rec

    def _observation(self) -> dict:
        obs = self.match.env.observe(self.seat)
        return {"text": self._text(), **{k: obs[k] for k in obs}}

    def _text(self) -> str:
        """The seat's prompt; once the match is over, its rules, history and state."""
        env, agent = self.match.env, self.seat
        if self._to_move():
            return env.view(agent).prompt()
        view = TextView(
            agent, env.rules_text(agent), env.state_text(agent), env.history_text(agent), [], []
        )
        return view.prompt().rsplit("\n\nLEGAL MOVES:", 1)[0]

    def _info(self) -> dict:
        env, agent = self.match.env, self.seat
        texts = {  # the view's parts, as an LLM agent's prompt modes take them
            "seat": agent,
            "rules": env.rules_text(agent),
            "state": env.state_text(agent),
            "history": list(env.history_text(agent)),
        }
        if not self._to_move():
            return {"legal_moves": [], "legal_actions": [], "free_text": False, **texts}
        free = env.is_free_text(agent)
        actions, moves = ([], []) if free else env.legal_pairs(agent)
        return {
            "legal_moves": list(moves),
            "legal_actions": list(actions),
            "free_text": free,
            **texts,
        }

    def _finish_match(self) -> None:
        """The match is over: its record (appended to `record`), the opponents told."""
        if not self._open:
            return
        rec = finish_match(self.match)
        self.last_record = rec
        if self.record_path:
            append_jsonl(self.record_path, rec)
        self._end_match()

    def _end_match(self) -> None:
        """Tell the opponents the match is over (an unfinished one is dropped, not recorded)."""
        if self._open:
            for agent in self.opponents.values():
                if hasattr(agent, "end_match"):
                    agent.end_match(self.match.plan.match_id)
        self._open = False


def _seat_agent(seat: int | str, players: list[str]) -> str:
    """The env agent of `seat` (an index or an agent name)."""
    if isinstance(seat, str) and seat in players:
        return seat
    if isinstance(seat, int | np.integer) and 0 <= int(seat) < len(players):
        return players[int(seat)]
    raise ValueError(
        f"seat must be 0..{len(players) - 1} or one of {', '.join(players)}, got {seat!r}"
    )


def _seat_agents_of(seat: int | str | Sequence[int | str], players: list[str]) -> list[str]:
    """The env agents of `seat` (one seat, or a list of them), in seat order."""
    seats = [seat] if isinstance(seat, int | str | np.integer) else list(seat)
    agents = {_seat_agent(s, players) for s in seats}
    if not seats or len(agents) != len(seats):
        raise ValueError(f"seats must be distinct and at least one, got {seat!r}")
    return [p for p in players if p in agents]


def _seat_agents(
    game: str,
    params: dict,
    mine: list[int],
    players: int,
    opponents: str | dict | Sequence[str | dict],
    player_name: str,
    named: dict,
) -> tuple[list[str], dict[str, Agent]]:
    """The agent name of every seat (the caller's seats `mine` are `player_name`,
    `player_name#2`, ...) and the opponents' agents by name, built from their specs (checked
    first: `agents.check_spec`); an opponent that is a key of `named` is that agent."""
    others = players - len(mine)
    if isinstance(opponents, str | dict):
        specs = [opponents] * others
    else:
        specs = list(opponents)
    if len(specs) != others:
        raise ValueError(
            f"opponents must be one spec or {others} (one per other seat of {game}), got {len(specs)}"
        )
    names, built = [], {}
    for spec in specs:
        if isinstance(spec, str) and spec in named:
            name = spec
            check_player(named[name], [(game, params)])
            built.setdefault(name, (spec, build_agent(name, named[name])))
            names.append(name)
            continue
        check_spec(spec, [(game, params)])
        name = spec if isinstance(spec, str) else str(parse_spec(spec).get("name", spec["type"]))
        if name in built and built[name][0] != spec:
            name = f"{name}-{len(built)}"  # not "#": X#k names another seat of player X
        built.setdefault(name, (spec, make_agent(spec, name)))
        names.append(name)
    if player_name in built:
        raise ValueError(f"player_name {player_name!r} is also an opponent's name")
    for k, i in enumerate(mine):
        names.insert(i, player_name if k == 0 else f"{player_name}#{k + 1}")
    return names, {name: agent for name, (_, agent) in built.items()}
