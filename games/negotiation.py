"""Simple Negotiation: trade resources valued privately (text-native, after TextArena/SPIRAL).

TextArena's `SimpleNegotiation` (used by SPIRAL) has two players with resource
inventories and private per-resource values who take turns; a turn is free text that may
contain `[Offer: 3 Wood -> 2 Gold]`, `[Accept]` or `[Deny]`; after a fixed number of turns
the player whose inventory value rose more wins (+1/-1, draw 0). SPIRAL's copy uses two
resources (Wood, Gold), both players start with 10 of each, values Wood 5 / Gold 15 for
player 0 and the reverse for player 1. Ours keeps the rules and makes each turn one move
from a small enumerated set (no free-text chatter), so every turn is a legal action.

Rules      Two players, each with an inventory of resources (default Wood, Stone, Gold;
           3..8 of each, drawn at reset) and a private value per unit of each resource
           (default 1..10, drawn per player). Inventories are public, values are private.
           Players alternate turns, player_0 first, for `max_turns` turns in total
           (default 10). On a turn a player either
             - makes an offer `[Offer: a X -> b Y]`: give a units of X for b units of the
               other's Y (one resource each way, X != Y, 1 <= a, b <= `max_offer`, the
               proposer must hold a X and the other b Y);
             - or, when the other player's offer is pending: `[Accept]` (the trade happens)
               or `[Deny]`; a counter-offer also declines the pending offer;
             - or, with no offer pending, `[Pass]`.
           An offer not answered on the very next turn lapses; one made on the last turn is
           never answered. Inventory value = sum over resources of quantity x own value.
Moves      Discrete: offers enumerated (give resource, give qty, get resource, get qty),
           then Accept, Deny, Pass. Move strings "Offer: 2 Wood -> 1 Gold", "Accept",
           "Deny", "Pass" (answered e.g. `[Offer: 2 Wood -> 1 Gold]`).
           With R resources and cap Q: R (R - 1) Q^2 + 3 actions (57 by default).
Observation  `{"observation": float32[4R + 2], "action_mask": int8[num actions]}`: own
           inventory, other's inventory, own values, the pending offer as the change to own
           inventory if accepted, who has the pending offer (+1 offer to me, -1 my offer,
           0 none), turns left.
Rewards    `reward="gain"` (default, general-sum): when a trade happens each player gets the
           change in its own inventory value; cumulative reward = final - initial value.
           `reward="win_loss"` (SPIRAL, zero-sum): at the end +1 to the player whose value
           rose more, -1 to the other, 0 each on a tie. Illegal action: -1 to the
           offender, 0 to the other, game over.
Params     resources, quantity_range=(3, 8), value_range=(1, 10), inventories=None and
           values=None (per-player tuples fixing the start; None draws them), max_offer=3,
           max_turns=10, reward="gain", illegal_reward=-1. `preset="spiral"` gives SPIRAL's
           setting (Wood/Gold, 10 each, values 5/15 and 15/5, win_loss, max_offer=5);
           explicit params override the preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np
from gymnasium import spaces

from games.repeated_matrix import int_action
from games.text_env import TextEnv

PRESETS: dict[str, dict] = {
    "default": dict(
        resources=("Wood", "Stone", "Gold"),
        quantity_range=(3, 8),
        value_range=(1, 10),
        inventories=None,
        values=None,
        max_offer=3,
        max_turns=10,
        reward="gain",
    ),
    "spiral": dict(
        resources=("Wood", "Gold"),
        inventories=((10, 10), (10, 10)),
        values=((5, 15), (15, 5)),
        max_offer=5,
        max_turns=10,
        reward="win_loss",
    ),
}
REWARDS = ("gain", "win_loss")


@dataclass(frozen=True)
class Offer:
    """Proposer gives `give_qty` of resource `give` and receives `get_qty` of resource `get`."""

    give: int
    give_qty: int
    get: int
    get_qty: int


@dataclass
class Event:
    """One turn: who did what (kind: offer | accept | deny | counter | pass)."""

    turn: int
    player: int
    kind: str
    offer: Offer | None = None  # the offer made (offer/counter) or answered (accept/deny)
    declined: Offer | None = None  # for a counter-offer: the offer it declined


class Negotiation(TextEnv):
    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "negotiation",
        "is_parallelizable": False,
    }

    def __init__(
        self,
        resources: tuple[str, ...] = PRESETS["default"]["resources"],
        quantity_range: tuple[int, int] = (3, 8),
        value_range: tuple[int, int] = (1, 10),
        inventories: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
        values: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
        max_offer: int = 3,
        max_turns: int = 10,
        reward: str = "gain",
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        self.resources = tuple(str(r) for r in resources)
        R = len(self.resources)
        if R < 2 or len(set(r.lower() for r in self.resources)) != R:
            raise ValueError(f"need at least 2 distinct resource names, got {resources!r}")
        self.quantity_range = _range("quantity_range", quantity_range, 0)
        self.value_range = _range("value_range", value_range, 0)
        self.fixed_inventories = _per_player("inventories", inventories, R, integer=True)
        self.fixed_values = _per_player("values", values, R, integer=False)
        if not isinstance(max_offer, (int, np.integer)) or max_offer < 1:
            raise ValueError(f"max_offer must be a positive integer, got {max_offer!r}")
        if not isinstance(max_turns, (int, np.integer)) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        self.max_offer, self.max_turns, self.reward_mode = int(max_offer), int(max_turns), reward
        qty = range(1, self.max_offer + 1)
        self.offers = [
            Offer(i, a, j, b)
            for i, j in product(range(R), repeat=2)
            if i != j
            for a, b in product(qty, qty)
        ]
        self._offer_id = {o: k for k, o in enumerate(self.offers)}
        K = len(self.offers)
        self.ACCEPT, self.DENY, self.PASS = K, K + 1, K + 2
        self.num_actions = K + 3
        self.possible_agents = ["player_0", "player_1"]
        self._index = {"player_0": 0, "player_1": 1}
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (4 * R + 2,), np.float32),
                "action_mask": spaces.Box(0, 1, (self.num_actions,), np.int8),
            }
        )
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(self.num_actions) for a in self.possible_agents}
        self.inventory = np.zeros((2, R), np.int64)
        self.values = np.zeros((2, R), np.float64)
        self.start_value = np.zeros(2)
        self.pending: tuple[int, Offer] | None = None  # (proposer, offer)
        self.events: list[Event] = []
        self.turn = 0

    # --- AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        R = len(self.resources)
        if self.fixed_inventories is None:
            lo, hi = self.quantity_range
            self.inventory = self.np_random.integers(lo, hi + 1, size=(2, R))
        else:
            self.inventory = np.array(self.fixed_inventories, np.int64)
        if self.fixed_values is None:
            lo, hi = self.value_range
            self.values = self.np_random.integers(lo, hi + 1, size=(2, R)).astype(np.float64)
        else:
            self.values = np.array(self.fixed_values, np.float64)
        self.start_value = np.array([self.value_of(p) for p in (0, 1)])
        self.pending, self.events, self.turn = None, [], 0
        self._start_episode()
        self.agent_selection = "player_0"

    def value_of(self, player: int) -> float:
        """Inventory value of `player` in its own values."""
        return float(self.inventory[player] @ self.values[player])

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        me = self._index[agent]
        a = int_action(action, self.num_actions)
        if a is None or a not in self.legal_actions(agent):
            return self._illegal(agent, action)
        pending = self.pending[1] if self.pending else None
        self.pending = None
        if a == self.ACCEPT:
            self._trade(1 - me, pending)
            self.events.append(Event(self.turn, me, "accept", pending))
        elif a == self.DENY:
            self.events.append(Event(self.turn, me, "deny", pending))
        elif a == self.PASS:
            self.events.append(Event(self.turn, me, "pass"))
        else:
            offer = self.offers[a]
            self.pending = (me, offer)
            self.events.append(
                Event(self.turn, me, "counter" if pending else "offer", offer, pending)
            )
        self.turn += 1
        if self.turn >= self.max_turns:
            self.pending = None
            if self.reward_mode == "win_loss":
                gain = [self.value_of(p) - self.start_value[p] for p in (0, 1)]
                sign = float(np.sign(gain[0] - gain[1]))
                self.rewards["player_0"], self.rewards["player_1"] = sign, -sign
            for ag in self.agents:
                self.terminations[ag] = True
        self.agent_selection = self.possible_agents[1 - me]
        self._accumulate_rewards()

    def _trade(self, proposer: int, offer: Offer) -> None:
        before = [self.value_of(p) for p in (0, 1)]
        acceptor = 1 - proposer
        self.inventory[proposer, offer.give] -= offer.give_qty
        self.inventory[acceptor, offer.give] += offer.give_qty
        self.inventory[acceptor, offer.get] -= offer.get_qty
        self.inventory[proposer, offer.get] += offer.get_qty
        if self.reward_mode == "gain":
            for p, ag in enumerate(self.possible_agents):
                self.rewards[ag] = self.value_of(p) - before[p]

    def _feasible(self, proposer: int, offer: Offer) -> bool:
        return (
            self.inventory[proposer, offer.give] >= offer.give_qty
            and self.inventory[1 - proposer, offer.get] >= offer.get_qty
        )

    def legal_actions(self, agent: str | None = None) -> list[int]:
        agent = agent or self.agent_selection
        if (
            self.terminations.get(agent, True)
            or self.truncations.get(agent, True)
            or agent != self.agent_selection
        ):
            return []
        me = self._index[agent]
        offers = [k for k, o in enumerate(self.offers) if self._feasible(me, o)]
        if self.pending is None:
            return offers + [self.PASS]
        proposer, offer = self.pending
        accept = [self.ACCEPT] if self._feasible(proposer, offer) else []
        return accept + [self.DENY] + offers

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        me = self._index[agent]
        change = np.zeros(len(self.resources))
        flag = 0.0
        if self.pending is not None:
            proposer, o = self.pending
            sign = 1.0 if proposer != me else -1.0  # the recipient gains `give`, loses `get`
            change[o.give] += sign * o.give_qty
            change[o.get] -= sign * o.get_qty
            flag = sign
        obs = np.concatenate(
            [
                self.inventory[me],
                self.inventory[1 - me],
                self.values[me],
                change,
                [flag, self.max_turns - self.turn],
            ]
        ).astype(np.float32)
        mask = np.zeros(self.num_actions, np.int8)
        mask[self.legal_actions(agent)] = 1
        return {"observation": obs, "action_mask": mask}

    # --- text layer --------------------------------------------------------------------
    def offer_text(self, offer: Offer) -> str:
        return f"{offer.give_qty} {self.resources[offer.give]} -> {offer.get_qty} {self.resources[offer.get]}"

    def move_text(self, agent: str, action: Any) -> str:
        a = int(action)
        if a == self.ACCEPT:
            return "Accept"
        if a == self.DENY:
            return "Deny"
        if a == self.PASS:
            return "Pass"
        return f"Offer: {self.offer_text(self.offers[a])}"

    def rules_text(self, agent: str) -> str:
        me = self._index[agent]
        own = ", ".join(f"{r} {v:g}" for r, v in zip(self.resources, self.values[me]))
        goal = (
            "Your reward is the change in your own inventory value (final value minus starting value)."
            if self.reward_mode == "gain"
            else "At the end, the player whose inventory value (in their own values) rose more wins (+1), the other "
            "loses (-1); equal changes are a draw (0)."
        )
        return (
            f"You are {agent} in a two-player negotiation game. Each player holds some {', '.join(self.resources)}.\n"
            f"Your private value per unit: {own}. The other player values the resources differently and you do "
            "not know how; both inventories are visible to both players.\n"
            f"Players take turns, player_0 first, for {self.max_turns} turns in total. On your turn you can:\n"
            f"  [Offer: a X -> b Y]  offer to give a units of your X for b units of the other's Y "
            f"(one resource each way, 1 to {self.max_offer} units, only what each of you holds);\n"
            "  [Accept] or [Deny]  answer the other player's pending offer (a counter-offer also declines it);\n"
            "  [Pass]  do nothing (only when no offer is waiting for you).\n"
            "An offer lapses if it is not accepted on the very next turn.\n"
            f"Your inventory value = sum of (units held x your value per unit). {goal}\n"
            "Answer with exactly one of the legal moves, e.g. [Accept] or [Offer: 1 "
            f"{self.resources[0]} -> 1 {self.resources[1]}]."
        )

    def state_text(self, agent: str) -> str:
        me = self._index[agent]
        own = ", ".join(
            f"{q} {r} (worth {v:g} each)"
            for q, r, v in zip(self.inventory[me], self.resources, self.values[me])
        )
        other = ", ".join(f"{q} {r}" for q, r in zip(self.inventory[1 - me], self.resources))
        now, start = self.value_of(me), self.start_value[me]
        lines = [
            f"Your inventory: {own}. Value {now:g} (started at {start:g}, change {now - start:+g}).",
            f"The other player's inventory: {other}.",
        ]
        if self.terminations.get(agent, True) or self.truncations.get(agent, True):
            if "illegal_move" in self.infos.get(agent, {}):
                lines.append("The game ended early after an illegal move.")
            else:
                lines.append(f"The game is over after {self.turn} turns.")
            return "\n".join(lines)
        lines.append(
            f"Turn {self.turn + 1} of {self.max_turns}; "
            + ("your move." if agent == self.agent_selection else "the other player's move.")
        )
        if self.pending is not None:
            proposer, o = self.pending
            if proposer == me:
                lines.append(f"Your offer is waiting for an answer: {self.offer_text(o)}.")
            else:
                lines.append(
                    f"The other player offers you {o.give_qty} {self.resources[o.give]} for {o.get_qty} of your "
                    f"{self.resources[o.get]}: [Accept], [Deny] or make a counter-offer."
                )
        return "\n".join(lines)

    def history_text(self, agent: str) -> list[str]:
        me = self._index[agent]
        lines = []
        for e in self.events:
            who = "you" if e.player == me else "the other player"
            if e.kind in ("offer", "counter"):
                o = e.offer
                text = f"{who} offered {o.give_qty} {self.resources[o.give]} for {o.get_qty} {self.resources[o.get]}"
                if e.kind == "counter":
                    text += ", declining the pending offer"
            elif e.kind == "accept":
                text = f"{who} accepted the offer {self.offer_text(e.offer)}; the trade was made"
            elif e.kind == "deny":
                text = f"{who} denied the offer {self.offer_text(e.offer)}"
            else:
                text = f"{who} passed"
            lines.append(f"Turn {e.turn + 1}: {text}")
        return lines


def _range(name: str, value: Any, low: int) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of integers (lo, hi), got {value!r}") from None
    if not low <= lo <= hi:
        raise ValueError(f"{name} must satisfy {low} <= lo <= hi, got {value!r}")
    return lo, hi


def _per_player(name: str, value: Any, R: int, integer: bool) -> tuple | None:
    if value is None:
        return None
    try:
        rows = tuple(tuple(float(x) for x in row) for row in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be two tuples of {R} numbers, got {value!r}") from None
    if len(rows) != 2 or any(len(r) != R for r in rows) or any(x < 0 for r in rows for x in r):
        raise ValueError(
            f"{name} must be two tuples of {R} non-negative numbers (one per resource), got {value!r}"
        )
    if integer and any(x != int(x) for r in rows for x in r):
        raise ValueError(f"{name} must hold whole numbers, got {value!r}")
    return tuple(tuple(int(x) if integer else x for x in r) for r in rows)


def env(preset: str = "default", **params) -> Negotiation:
    if preset not in PRESETS:
        raise ValueError(f"unknown negotiation preset {preset!r}; choose from {sorted(PRESETS)}")
    return Negotiation(**{**PRESETS["default"], **PRESETS[preset], **params})
