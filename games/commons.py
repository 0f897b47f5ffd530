"""Commons: n fishers share a lake whose fish regrow, or collapse when overfished.

A common-pool resource dilemma in the manner of GovSim's fishery (Piatti et al. 2024),
text-native, with a free-text discussion before each catch.

Rules      n players (3-8, default 4) share a stock of fish (tons), `initial_stock` at the
           start (default: `capacity` = 100). The game lasts `rounds` rounds (default 12).
           Each round:
           1. discussion (`discussion=True`): in seat order (player_0 first) every player
              may send one message, at most `max_message_chars` characters, which everyone
              reads at once (later speakers read the earlier messages);
           2. harvest: every player asks, simultaneously, for a whole number of tons
              a_i in 0..`max_harvest` (default 25); nobody sees another's ask before the
              round resolves. If the asks add up to at most the stock S, each gets its
              ask; otherwise the stock is shared in proportion to the asks, in whole tons
              with nothing lost (largest remainders): h_i = floor(S a_i / A) (A = sum of
              the asks), then the S - sum(h_i) tons left over go one each to the players
              with the largest remainders (S a_i mod A), the lower seat first on a tie. The
              whole stock is caught, and nobody gets more than it asked;
           3. the L = S - sum(h_i) tons left collapse if L < `collapse_threshold` (default
              5): the stock is 0 for good and the game ends at once. Otherwise they regrow
              logistically, rounded down and capped at the capacity K:
                  next stock = min(K, L + floor(growth x L x (K - L) / K))
              (`growth` = r, default 1.0; r = 2 restores a stock left at K / 2 to K in one
              round, as GovSim's doubling does).
           After each round every ask and catch is public. The game ends after `rounds`
           rounds or at a collapse.
Sustainable level  the stock left after a catch whose regrowth is largest, L* = the L in
           [collapse_threshold, K] maximising next stock - L (the largest such L on a
           tie): K / 2 = 50 by default, regrowing to 75 (a yield of 25 a round). A
           player's sustainable share at stock S is floor(max(0, S - L*) / n), at most
           `max_harvest`: if everyone takes it, at least L* tons are left and the stock
           never collapses (default, 4 players: 12 each at 100, then 6 each at 76).
Sustainable optimum  `sustainable_optimum(params)`: the largest total catch of all players
           together over the horizon, over every schedule of whole-ton round totals
           H_t <= min(S_t, n x max_harvest) (a collapse ends the schedule, its round's catch
           counted), by dynamic programming over the integer stocks 0..K:
               V_{T+1}(S) = 0,  V_t(S) = max_H [H + (V_{t+1}(next(S - H)) if S - H >=
               collapse_threshold else 0)];  the optimum is V_1(initial_stock).
           Its schedule fishes the lake down to near L* and takes everything in the last
           round (default: 375 tons = 50 in round 1, 25 in each of rounds 2-11, 75 in
           round 12).
Moves      discussion: free text (`is_free_text(agent)` is True; the arena sends a `str`),
           folded onto one line (runs of whitespace, newlines included, become one space:
           a message cannot pass for a line of the history) and truncated to
           `max_message_chars`; an empty string means "no message". harvest:
           action a = ask for a tons, move strings "0" .. "max_harvest".
Action space  `Discrete(max_harvest + 2)`: 0..max_harvest are asks, `max_harvest + 1`
           (`SILENT`) is "send no message", the only masked-in action of a discussion turn
           (PettingZoo's `api_test` and `seed_test` sample the masked Discrete space; see
           `games.trust_and_split`).
Observation  `{"observation": float32[4 + n], "action_mask": int8[max_harvest + 2]}`:
           rounds played, phase (0 discussion, 1 harvest), stock, own total catch, last
           round's catches (own first, then the others in seat order; -1 before round 1).
           Messages are in the text layer only.
Rewards    each player's catch of a round when the round resolves; cumulative reward =
           total catch. Illegal action (a str in the harvest, an ask in the discussion, out
           of range, None): `illegal_reward` (-1) to the offender, 0 to the others, game over.
State text  the round (of how many), the stock, each past round's catches (yours first,
           then the others in seat order; the asks too when they were scaled down), the
           totals, this round's messages, and what to do now.
History    the messages of the past rounds, one line each.
Roles      `roles`: every player is a "harvester"; `teams`: each player its own team (its
           agent name).
Dynamics   mixed: sequential messages, simultaneous asks (buffered in seat order; nobody
           sees a pending ask). With `discussion=False` only the asks remain and the game
           is parallelizable (`games.make_parallel("commons", discussion=False)`).
Params     num_players=4 (3..8), rounds=12, capacity=100, initial_stock=None (= capacity),
           growth=1.0, collapse_threshold=5, max_harvest=25, discussion=True,
           max_message_chars=200, illegal_reward=-1.
Bots       (`agents.commons_bots`) `sustainable` asks its sustainable share, `greedy` asks
           `max_harvest`; each says first, honestly, what it will take ("I will take 6.").
           For the social bots (`agents.social_bots`) cooperating is asking the sustainable
           share, defecting asking `max_harvest`; a player cooperated in a round iff it
           asked at most its sustainable share of that round's stock.

Playing commons
           arena play commons --agents sustainable greedy random --matches 8
           arena eval --agent sustainable --games commons --opponents greedy tit_for_tat --matches 8
           arena tournament configs/tournament_commons.yaml
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from gymnasium import spaces

from games.repeated_matrix import int_action
from games.text_env import TextEnv, fold_message


@dataclass(frozen=True)
class Rules:
    """The numbers that decide how the stock moves (what `sustainable_optimum` reads)."""

    num_players: int
    rounds: int
    capacity: int
    initial_stock: int
    growth: float
    collapse_threshold: int
    max_harvest: int

    def regrow(self, left: int) -> int:
        """The stock after `left` tons regrow: min(K, L + floor(growth x L x (K - L) / K))."""
        k = self.capacity
        return min(k, left + math.floor(self.growth * left * (k - left) / k + 1e-9))

    @cached_property
    def sustainable_level(self) -> int:
        """L*: the stock left after a catch whose regrowth is largest (the largest on a tie)."""
        levels = range(self.collapse_threshold, self.capacity + 1)
        return max(levels, key=lambda left: (self.regrow(left) - left, left))

    def sustainable_share(self, stock: int) -> int:
        """A player's share of the catch that leaves the sustainable level: floor(max(0, S - L*) / n)."""
        surplus = max(0, stock - self.sustainable_level)
        return min(self.max_harvest, surplus // self.num_players)


@dataclass
class RoundResult:
    """One resolved round."""

    stock: int  # at the start of the round
    asks: tuple[int, ...]
    catches: tuple[int, ...]
    left: int  # after the catch
    next_stock: int  # after regrowth; 0 after a collapse
    collapsed: bool


def share_out(asks: tuple[int, ...], stock: int) -> tuple[int, ...]:
    """The catches of `asks` from `stock`: the asks if they fit, else shares in proportion to
    them by largest remainders (lower seat first on a tie), summing to exactly `stock`."""
    total = sum(asks)
    if total <= stock:
        return tuple(asks)
    catches = [stock * a // total for a in asks]
    remainders = [stock * a % total for a in asks]
    order = sorted(range(len(asks)), key=lambda p: (-remainders[p], p))
    for p in order[: stock - sum(catches)]:
        catches[p] += 1
    return tuple(catches)


def best_total(rules: Rules) -> int:
    """The sustainable optimum of `rules` (module docstring): backward induction over the
    integer stocks, V_t(S) = S + max over L in [S - Hmax, S] of (value of leaving L) - L."""
    k, hmax = rules.capacity, rules.num_players * rules.max_harvest
    after = [rules.regrow(left) for left in range(k + 1)]
    value = [0] * (k + 1)  # V_{T+1}
    for _ in range(rules.rounds):
        gain = [
            (value[after[left]] if left >= rules.collapse_threshold else 0) - left
            for left in range(k + 1)
        ]
        value = [s + m for s, m in enumerate(_window_max(gain, hmax))]
    return value[rules.initial_stock]


def _window_max(x: list[int], width: int) -> list[int]:
    """out[i] = max(x[max(0, i - width) .. i]) (a monotone deque, O(len(x)))."""
    out, window = [], deque()
    for i, v in enumerate(x):
        while window and x[window[-1]] <= v:
            window.pop()
        window.append(i)
        if window[0] < i - width:
            window.popleft()
        out.append(x[window[0]])
    return out


def sustainable_optimum(params: dict | None = None) -> int:
    """The largest total catch over the horizon of a commons game with `params` (its
    `games.make("commons", **params)` parameters; defaults for the rest)."""
    return Commons(**(params or {})).sustainable_optimum()


class Commons(TextEnv):
    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "commons",
        "is_parallelizable": False,
    }
    ROLES = ("harvester",)

    def __init__(
        self,
        num_players: int = 4,
        rounds: int = 12,
        capacity: int = 100,
        initial_stock: int | None = None,
        growth: float = 1.0,
        collapse_threshold: int = 5,
        max_harvest: int = 25,
        discussion: bool = True,
        max_message_chars: int = 200,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        self.rules = _check_rules(
            num_players, rounds, capacity, initial_stock, growth, collapse_threshold, max_harvest
        )
        if not isinstance(discussion, (bool, np.bool_)):
            raise ValueError(f"discussion must be true or false, got {discussion!r}")
        if not _whole(max_message_chars) or max_message_chars < 1:
            raise ValueError(
                f"max_message_chars must be a positive integer, got {max_message_chars!r}"
            )
        self.num_players, self.max_harvest = self.rules.num_players, self.rules.max_harvest
        self.discussion, self.max_message_chars = bool(discussion), int(max_message_chars)
        self.metadata = {**self.metadata, "is_parallelizable": not self.discussion}
        self.SILENT = self.max_harvest + 1
        self.possible_agents = [f"player_{i}" for i in range(self.num_players)]
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self.roles = {a: "harvester" for a in self.possible_agents}
        self.teams = {a: a for a in self.possible_agents}
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (4 + self.num_players,), np.float32),
                "action_mask": spaces.Box(0, 1, (self.max_harvest + 2,), np.int8),
            }
        )
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {
            a: spaces.Discrete(self.max_harvest + 2) for a in self.possible_agents
        }
        self.stock = self.rules.initial_stock
        self.results: list[RoundResult] = []
        self.messages: list[list[tuple[int, str]]] = []  # per round: (speaker, text)
        self.phase = "harvest"
        self._asks: dict[int, int] = {}
        self._optimum: int | None = None

    def sustainable_optimum(self) -> int:
        """The largest total catch over the horizon (module docstring), computed once."""
        if self._optimum is None:
            self._optimum = best_total(self.rules)
        return self._optimum

    # --- AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        self.stock = self.rules.initial_stock
        self.results, self.messages = [], []
        self._start_episode()
        self._new_round()

    def _new_round(self) -> None:
        self.messages.append([])
        self._asks = {}
        self.phase = "discussion" if self.discussion else "harvest"
        self.agent_selection = self.possible_agents[0]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        i = self._index[agent]
        if self.phase == "discussion":
            if isinstance(action, str):
                text = fold_message(action, self.max_message_chars)
            elif int_action(action, self.SILENT + 1) == self.SILENT:
                text = ""
            else:
                return self._illegal(agent, action)
            self.messages[-1].append((i, text))
            if i + 1 < self.num_players:
                self.agent_selection = self.possible_agents[i + 1]
            else:
                self.phase = "harvest"
                self.agent_selection = self.possible_agents[0]
            return
        ask = int_action(action, self.max_harvest + 1)
        if ask is None:
            return self._illegal(agent, action)
        self._asks[i] = ask
        if i + 1 < self.num_players:
            self.agent_selection = self.possible_agents[i + 1]
            return
        self._resolve()

    def _resolve(self) -> None:
        asks = tuple(self._asks[p] for p in range(self.num_players))
        catches = share_out(asks, self.stock)
        left = self.stock - sum(catches)
        collapsed = left < self.rules.collapse_threshold
        nxt = 0 if collapsed else self.rules.regrow(left)
        self.results.append(RoundResult(self.stock, asks, catches, left, nxt, collapsed))
        self.stock = nxt
        for p, a in enumerate(self.possible_agents):
            self.rewards[a] = float(catches[p])
            self.infos[a]["last_round"] = {
                "round": len(self.results),
                "asks": list(asks),
                "catches": list(catches),
                "stock": nxt,
                "collapsed": collapsed,
            }
        if collapsed or len(self.results) >= self.rules.rounds:
            for a in self.agents:
                self.terminations[a] = True
            self.agent_selection = self.possible_agents[0]
        else:
            self._new_round()
        self._accumulate_rewards()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        i = self._index[agent]
        obs = np.full(4 + self.num_players, -1.0, np.float32)
        obs[0] = len(self.results)
        obs[1] = 1.0 if self.phase == "harvest" else 0.0
        obs[2] = self.stock
        obs[3] = sum(r.catches[i] for r in self.results)
        if self.results:
            obs[4:] = [self.results[-1].catches[p] for p in self._observer_first(i)]
        mask = np.zeros(self.max_harvest + 2, np.int8)
        mask[self.legal_actions(agent)] = 1
        return {"observation": obs, "action_mask": mask}

    def legal_actions(self, agent: str | None = None) -> list[int]:
        agent = agent or self.agent_selection
        if self._over(agent):
            return []
        if self.phase == "discussion":
            return [self.SILENT] if agent == self.agent_selection else []
        return [] if self._index[agent] in self._asks else list(range(self.max_harvest + 1))

    def is_free_text(self, agent: str) -> bool:
        return (
            self.phase == "discussion" and not self._over(agent) and agent == self.agent_selection
        )

    def move_text(self, agent: str, action: Any) -> str:
        if isinstance(action, str):
            return action
        return "(no message)" if int(action) == self.SILENT else str(int(action))

    def _observer_first(self, i: int) -> list[int]:
        """Seats as player `i` reads them: its own first, then the others in seat order."""
        return [i] + [p for p in range(self.num_players) if p != i]

    # --- what scripted bots read -------------------------------------------------------
    def cooperation_history(self, agent: str) -> list[tuple[bool, tuple[bool, ...]]]:
        """Per resolved round: did this player cooperate, did each other player (seat order).
        A player cooperated iff it asked at most its sustainable share of the round's stock."""
        i = self._index[agent]
        out = []
        for r in self.results:
            fair = self.rules.sustainable_share(r.stock)
            ok = [a <= fair for a in r.asks]
            out.append((ok[i], tuple(ok[p] for p in range(self.num_players) if p != i)))
        return out

    def social_action(self, agent: str, cooperate: bool) -> Any:
        """Harvest: the sustainable share (cooperate) or `max_harvest` (defect); discussion:
        the honest message saying which ("I will take 6.")."""
        ask = self.rules.sustainable_share(self.stock) if cooperate else self.max_harvest
        return f"I will take {ask}." if self.phase == "discussion" else ask

    # --- text layer --------------------------------------------------------------------
    def rules_text(self, agent: str) -> str:
        r = self.rules
        others = ", ".join(a for a in self.possible_agents if a != agent)
        talk = (
            f"first every fisher may send one message to all the others (at most {self.max_message_chars} "
            "characters), in seat order, player_0 first; then "
            if self.discussion
            else ""
        )
        return (
            f"You are {agent}, one of {r.num_players} fishers sharing a lake (the others: {others}).\n"
            f"The lake holds at most {r.capacity} tons of fish and starts with {r.initial_stock}. "
            f"The game lasts {r.rounds} rounds.\n"
            f"Each round: {talk}all fishers ask, at the same time, for a number of tons from 0 to {r.max_harvest}; "
            "nobody sees the others' asks before the round ends. If the asks add up to more than the fish in the "
            "lake, all the fish are caught, shared in proportion to the asks (in whole tons).\n"
            f"The fish left after the catch regrow: left + {r.growth:g} x left x ({r.capacity} - left) / {r.capacity}, "
            f"rounded down, at most {r.capacity}. If fewer than {r.collapse_threshold} tons are left after a catch, "
            "the fish die out for good and the game ends at once.\n"
            "After each round everyone's asks and catches are revealed.\n"
            "Your goal: as many tons of fish as possible in total over all rounds.\n"
            f"When fishing, answer with a number of tons, e.g. [{min(5, r.max_harvest)}]."
            + (" When messaging, write just the message." if self.discussion else "")
        )

    def state_text(self, agent: str) -> str:
        i = self._index[agent]
        lines = [self._round_line(i, k, res) for k, res in enumerate(self.results, 1)]
        totals = [sum(res.catches[p] for res in self.results) for p in range(self.num_players)]
        lines.append(f"Total caught: {self._per_seat(i, totals)}.")
        if self._over(agent):
            played = len(self.results)
            if "illegal_move" in self.infos.get(agent, {}):
                end = f"The game ended early after an illegal move, after {played} rounds."
            elif self.results and self.results[-1].collapsed:
                end = f"The game is over: the fish died out in round {played}."
            else:
                end = f"The game is over after {played} rounds."
            return "\n".join([end, *lines])
        head = (
            f"Round {len(self.results) + 1} of {self.rules.rounds}. "
            f"Fish in the lake: {self.stock} tons."
        )
        lines.insert(0, head)
        if self.discussion:
            said = [self._said(i, p, text) for p, text in self.messages[-1]]
            lines += ["Messages this round:", *said] if said else []
        lines.append(self._prompt_line(agent, i))
        return "\n".join(lines)

    def _prompt_line(self, agent: str, i: int) -> str:
        if self.phase == "discussion":
            if agent == self.agent_selection:
                return "Discussion: write your message to the other fishers."
            return f"Discussion: {self.agent_selection} speaks next."
        if i in self._asks:
            return f"You asked for {self._asks[i]} tons; waiting for the others' asks."
        return f"Fishing: how many tons do you ask for (0 to {self.max_harvest})?"

    def _per_seat(self, i: int, values: list[int] | tuple[int, ...]) -> str:
        names = {p: ("you" if p == i else self.possible_agents[p]) for p in range(self.num_players)}
        return ", ".join(f"{names[p]} {values[p]}" for p in self._observer_first(i))

    def _round_line(self, i: int, k: int, res: RoundResult) -> str:
        """A resolved round in one line, as player `i` reads it."""
        asked = f" (asked: {self._per_seat(i, res.asks)})" if res.asks != res.catches else ""
        after = "the fish died out" if res.collapsed else f"regrew to {res.next_stock}"
        return (
            f"Round {k}: {res.stock} tons; caught: {self._per_seat(i, res.catches)}{asked}; "
            f"{res.left} left, {after}."
        )

    def _said(self, i: int, speaker: int, text: str) -> str:
        who = "you" if speaker == i else self.possible_agents[speaker]
        return f'{who} said: "{text}"' if text else f"{who} sent no message."

    def history_text(self, agent: str) -> list[str]:
        i = self._index[agent]
        return [
            f"Round {k}: {self._said(i, p, text)}"
            for k, msgs in enumerate(self.messages[: len(self.results)], 1)
            for p, text in msgs
        ]


def _whole(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_rules(
    num_players: Any,
    rounds: Any,
    capacity: Any,
    initial_stock: Any,
    growth: Any,
    collapse_threshold: Any,
    max_harvest: Any,
) -> Rules:
    """The stock's rules, or a one-line ValueError naming the bad parameter."""
    if not _whole(num_players) or not 3 <= num_players <= 8:
        raise ValueError(f"num_players must be an integer in 3..8, got {num_players!r}")
    if not _whole(rounds) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    if not _whole(capacity) or not 1 <= capacity <= 100_000:
        raise ValueError(f"capacity must be an integer in 1..100000, got {capacity!r}")
    stock = capacity if initial_stock is None else initial_stock
    if not _whole(stock) or not 0 <= stock <= capacity:
        raise ValueError(f"initial_stock must be an integer in 0..capacity, got {initial_stock!r}")
    if isinstance(growth, bool) or not isinstance(growth, (int, float, np.number)) or growth < 0:
        raise ValueError(f"growth must be a number >= 0, got {growth!r}")
    if not _whole(collapse_threshold) or not 0 <= collapse_threshold <= capacity:
        raise ValueError(
            f"collapse_threshold must be an integer in 0..capacity, got {collapse_threshold!r}"
        )
    if not _whole(max_harvest) or not 1 <= max_harvest <= 1000:
        raise ValueError(f"max_harvest must be an integer in 1..1000, got {max_harvest!r}")
    return Rules(
        int(num_players),
        int(rounds),
        int(capacity),
        int(stock),
        float(growth),
        int(collapse_threshold),
        int(max_harvest),
    )


def env(**params) -> Commons:
    return Commons(**params)
