"""Trust-and-Split: hidden rock-paper-scissors hands, messages, then a coin split.

As in "Learning Robust Social Strategies" (dereckpiche/AdAlignLLM, TAS-RPS), text-native.

Rules      Two players, 10 rounds. Each round both are dealt rock-paper-scissors hands;
           the two hands are always different (dealt without replacement), so there is
           never a tie: rock beats scissors, scissors beats paper, paper beats rock. The
           winning hand values each coin at 10 points (`high_value`), the losing hand at 1
           (`low_value`). Each player sees only its own hand.
           Then each player may send one message (at most 500 characters) to the other;
           the first speaker alternates (player_0 in round 1, player_1 in round 2, ...),
           and the second speaker reads the first message before writing.
           Then both claim, simultaneously, a number of coins c_i in 0..10. If the claims
           add up to more than 10 they are scaled down: q_i = 10 c_i / max(10, c_0 + c_1).
           Points of the round = q_i x own coin value.
           After the round both hands and both claims are revealed to both players.
Moves      message phase, `messages="free"` (default): free text (`is_free_text(agent)` is
           True; the arena sends the parsed message, a `str`, as the action). The env
           truncates a message to `max_message_chars`; an empty string means "no message".
           message phase, `messages="hand"`: the message is a move: name a hand, true or
           not (move strings "rock", "paper", "scissors"; the message sent is "My hand is
           rock."), or "nothing" (no message). A model that cannot write yet (a tiny one
           trained from scratch) can still learn to signal, and to trust or not.
           `messages="reveal"`: no message phase; both hands are shown in the claim phase
           (as if both had named their hands truly). What is left is the split alone: a
           repeated game in which the losing hand cooperates by claiming nothing.
           claim phase: action c in 0..10 = claim c coins; move strings "0" .. "10".
Action space  `Discrete(coins + 2)`: 0..coins are claims, `coins + 1` (= 11, `SILENT`) is
           "send no message", the only masked-in discrete action of a free message phase.
           With `messages="hand"`, `Discrete(coins + 5)`: `coins + 2 + k` names `HANDS[k]`.
           A gymnasium `Text` space is not used because PettingZoo's `api_test` and
           `seed_test` sample every action space with the Discrete action mask, which a
           `Text` space cannot take, and a space that changed between phases would break
           the test's action-space seeding. So: random/RL play is Discrete and masked;
           text play also passes a `str` during message phases.
Observation  `{"observation": float32[10], "action_mask": int8[coins + 2]}`: rounds played,
           phase (0 message, 1 claim), own hand one-hot (rock, paper, scissors), the other's
           last-round hand one-hot, own and other's last-round claim (-1 before round 1).
           Messages are in the text layer only.
Rewards    each round's points when the claims resolve (0..100 per round by default);
           cumulative reward = total points. Illegal action (a str in a claim phase, a
           claim in a message phase, out of range, None): -1 to the offender, 0 to the
           other, game over.
State text  the round (of how many), own hand, the totals and the phase; this round's
           messages so far (the second speaker reads the first's; in a claim phase both);
           with `messages="reveal"`, the other's hand and whether yours wins.
           `state_rounds=k` adds the last k rounds' results ("Last round: your hand won; you claimed 10, the other claimed
           0."); `state_progress=False` (needs `state_rounds`) drops the round and totals:
           a strict memory-k prompt for `prompt: state`.
Dynamics   mixed: sequential messages, simultaneous claims (buffered, player_0 then
           player_1; nobody sees the other's claim before the round resolves). Not
           parallelizable.
Params     rounds=10 (+ random_horizon / continuation / min_rounds / max_rounds as in
           `games.repeated_matrix`), coins=10, high_value=10, low_value=1,
           max_message_chars=500, messages="free" ("hand", "reveal"), state_rounds=0,
           state_progress=True, blank_messages=False, illegal_reward=-1.
           `blank_messages=True` (an evaluation control): every message is written as
           usual but its reader gets nothing ("the other player sent no message"; the
           scripted bots read no hand), so what the messages carry is measured by the
           difference it makes (`arena eval`'s `blank_messages`).
           `reset(options={"hands": [(h0, h1), ...]})` fixes the hands of the first rounds
           (for evaluation and tests).
Bots       (`agents.social_bots`) messages are always honest: "My hand is rock." (with
           `messages="hand"`, the move naming its own hand). To
           cooperate is to claim 10 when your hand beats the hand the other player named in
           this round's messages, 0 when it loses, 5 when the other named no single hand; to
           defect is to claim 10. Judging a past round, a player defected iff it held the
           losing hand and claimed more than half the coins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from games.repeated_matrix import check_state_text, horizon, int_action, rounds_ago
from games.text_env import TextEnv

HANDS = ("rock", "paper", "scissors")
MESSAGE_MODES = ("free", "hand", "reveal")
NO_MESSAGE = "nothing"  # the move string of SILENT with messages="hand"
BEATS = {"rock": "scissors", "scissors": "paper", "paper": "rock"}  # key beats value
_HAND_WORD = re.compile(r"\b(rock|paper|scissors)\b", re.I)


@dataclass
class RoundResult:
    """One resolved round."""

    hands: tuple[str, str]
    values: tuple[float, float]  # coin value per player
    claims: tuple[int, int]
    coins: tuple[float, float]  # q_i after scaling
    points: tuple[float, float]


def hand_message(hand: str) -> str:
    """The message that names `hand` (an honest bot's, or a hand move's with messages="hand")."""
    return f"My hand is {hand}."


def named_hand(message: str) -> str | None:
    """The one hand a message names, or None (no hand word, or several different ones)."""
    found = {m.lower() for m in _HAND_WORD.findall(message or "")}
    return found.pop() if len(found) == 1 else None


class TrustAndSplit(TextEnv):
    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "trust_and_split",
        "is_parallelizable": False,
    }

    def __init__(
        self,
        rounds: int = 10,
        random_horizon: str | None = None,
        continuation: float | None = None,
        min_rounds: int | None = None,
        max_rounds: int | None = None,
        coins: int = 10,
        high_value: float = 10.0,
        low_value: float = 1.0,
        max_message_chars: int = 500,
        messages: str = "free",
        state_rounds: int = 0,
        state_progress: bool = True,
        blank_messages: bool = False,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        if not isinstance(coins, (int, np.integer)) or coins < 1:
            raise ValueError(f"coins must be a positive integer, got {coins!r}")
        if not isinstance(max_message_chars, (int, np.integer)) or max_message_chars < 1:
            raise ValueError(
                f"max_message_chars must be a positive integer, got {max_message_chars!r}"
            )
        if not float(high_value) > float(low_value) >= 0:
            raise ValueError(
                f"need high_value > low_value >= 0, got {high_value!r} and {low_value!r}"
            )
        if messages not in MESSAGE_MODES:
            raise ValueError(f"messages must be one of {MESSAGE_MODES}, got {messages!r}")
        check_state_text(state_rounds, state_progress)
        self.message_mode = messages
        self.blank_messages = bool(blank_messages)
        self.state_rounds, self.state_progress = int(state_rounds), bool(state_progress)
        self.horizon = horizon(rounds, random_horizon, continuation, min_rounds, max_rounds)
        self.coins = int(coins)
        self.high_value, self.low_value = float(high_value), float(low_value)
        self.max_message_chars = int(max_message_chars)
        self.SILENT = self.coins + 1
        self.NAME = self.coins + 2  # NAME + k names HANDS[k] (messages="hand")
        n_actions = self.coins + (5 if messages == "hand" else 2)
        self.possible_agents = ["player_0", "player_1"]
        self._index = {"player_0": 0, "player_1": 1}
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (10,), np.float32),
                "action_mask": spaces.Box(0, 1, (n_actions,), np.int8),
            }
        )
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(n_actions) for a in self.possible_agents}
        self.results: list[RoundResult] = []
        self.messages: list[
            list[tuple[int, str]]
        ] = []  # per round: (speaker, text) in speaking order
        self.hands: tuple[str, str] = ("rock", "scissors")
        self.phase = "message"
        self.num_rounds = 0
        self._claims: dict[int, int] = {}
        self._fixed_hands: list[tuple[str, str]] = []

    # --- AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        self._fixed_hands = _check_hands((options or {}).get("hands", []))
        self.num_rounds = self.horizon.draw(self.np_random)
        self.results, self.messages = [], []
        self._start_episode()
        self._new_round()

    def _new_round(self) -> None:
        r = len(self.results)
        if r < len(self._fixed_hands):
            self.hands = self._fixed_hands[r]
        else:
            a, b = self.np_random.choice(3, size=2, replace=False)
            self.hands = (HANDS[a], HANDS[b])
        self.messages.append([])
        self._claims = {}
        self.phase = "claim" if self.message_mode == "reveal" else "message"
        self.agent_selection = self.possible_agents[0 if self.message_mode == "reveal" else r % 2]

    def value(self, player: int) -> float:
        """Coin value of `player` this round (10 if its hand wins, 1 if it loses)."""
        mine, theirs = self.hands[player], self.hands[1 - player]
        return self.high_value if BEATS[mine] == theirs else self.low_value

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        i = self._index[agent]
        if self.phase == "message":
            a = None if isinstance(action, str) else int_action(action, self.NAME + 3)
            if isinstance(action, str) and self.message_mode == "free":
                text = action.strip()[: self.max_message_chars]
            elif a == self.SILENT:
                text = ""
            elif a is not None and a >= self.NAME and self.message_mode == "hand":
                text = hand_message(HANDS[a - self.NAME])
            else:
                return self._illegal(agent, action)
            self.messages[-1].append((i, text))
            if len(self.messages[-1]) < 2:
                self.agent_selection = self.possible_agents[1 - i]
            else:
                self.phase = "claim"
                self.agent_selection = self.possible_agents[0]
            return
        claim = int_action(action, self.coins + 1)
        if claim is None:
            return self._illegal(agent, action)
        self._claims[i] = claim
        if len(self._claims) < 2:
            self.agent_selection = self.possible_agents[1]
            return
        self._resolve()

    def _resolve(self) -> None:
        claims = (self._claims[0], self._claims[1])
        scale = self.coins / max(self.coins, sum(claims))
        coins = tuple(c * scale for c in claims)
        values = (self.value(0), self.value(1))
        points = tuple(q * v for q, v in zip(coins, values))
        self.results.append(RoundResult(self.hands, values, claims, coins, points))
        for p, a in enumerate(self.possible_agents):
            self.rewards[a] = float(points[p])
            self.infos[a]["last_round"] = {
                "round": len(self.results),
                "claims": list(claims),
                "points": list(points),
            }
        if len(self.results) >= self.num_rounds:
            for a in self.agents:
                self.terminations[a] = True
            self.agent_selection = self.possible_agents[0]
        else:
            self._new_round()
        self._accumulate_rewards()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        i = self._index[agent]
        obs = np.full(10, 0.0, np.float32)
        obs[0] = len(self.results)
        obs[1] = 1.0 if self.phase == "claim" else 0.0
        obs[2 + HANDS.index(self.hands[i])] = 1.0
        if self.results:
            last = self.results[-1]
            obs[5 + HANDS.index(last.hands[1 - i])] = 1.0
            obs[8], obs[9] = last.claims[i], last.claims[1 - i]
        else:
            obs[8] = obs[9] = -1.0
        mask = np.zeros(self.action_spaces[agent].n, np.int8)
        mask[self.legal_actions(agent)] = 1
        return {"observation": obs, "action_mask": mask}

    def legal_actions(self, agent: str | None = None) -> list[int]:
        agent = agent or self.agent_selection
        if self._over(agent):
            return []
        i = self._index[agent]
        if self.phase == "message":
            if agent != self.agent_selection:
                return []
            if self.message_mode == "hand":
                return [self.NAME, self.NAME + 1, self.NAME + 2, self.SILENT]
            return [self.SILENT]
        return [] if i in self._claims else list(range(self.coins + 1))

    def is_free_text(self, agent: str) -> bool:
        return (
            self.message_mode == "free"
            and not self._over(agent)
            and self.phase == "message"
            and agent == self.agent_selection
        )

    def move_text(self, agent: str, action: Any) -> str:
        if isinstance(action, str):
            return action
        a = int(action)
        if self.message_mode == "hand" and a >= self.SILENT:
            return NO_MESSAGE if a == self.SILENT else HANDS[a - self.NAME]
        return "(no message)" if a == self.SILENT else str(a)

    # --- what scripted bots read -----------------------------------------------------
    def cooperation_history(self, agent: str) -> list[tuple[bool, tuple[bool]]]:
        """Per resolved round: did this player cooperate, did the other. A player defects
        when it claims more than half the coins while holding the losing hand."""
        i = self._index[agent]

        def cooperated(r: RoundResult, p: int) -> bool:
            return not (r.values[p] < r.values[1 - p] and 2 * r.claims[p] > self.coins)

        return [(cooperated(r, i), (cooperated(r, 1 - i),)) for r in self.results]

    def social_action(self, agent: str, cooperate: bool) -> Any:
        """Message phase: an honest message. Claim phase: see the module docstring."""
        i = self._index[agent]
        mine = self.hands[i]
        if self.phase == "message":
            if self.message_mode == "hand":
                return self.NAME + HANDS.index(mine)
            return hand_message(mine)
        if not cooperate:
            return self.coins
        if self.message_mode == "reveal":
            theirs = self.hands[1 - i]
        else:
            said = [named_hand(self.heard(i, p, text)) for p, text in self.messages[-1] if p != i]
            theirs = said[0] if said else None
        if theirs is None or theirs == mine:
            return self.coins // 2
        return self.coins if BEATS[mine] == theirs else 0

    # --- text layer --------------------------------------------------------------------
    def rules_text(self, agent: str) -> str:
        c, hi, lo = self.coins, self.high_value, self.low_value
        # per message mode: what each player sees and how a round opens; how to answer a message
        rounds, answer = {
            "free": (
                "You see only your own hand.\n"
                f"Each round: first both players may send one message (at most {self.max_message_chars} characters); "
                "the first speaker alternates each round and the second speaker reads the first message. Then both claim, ",
                " When messaging, write just the message.",
            ),
            "hand": (
                "You see only your own hand.\n"
                "Each round: first both players may name a hand to the other (truly or not) or say nothing; "
                "the first speaker alternates each round and the second speaker hears the first. Then both claim, ",
                f" When messaging, answer with a hand or {NO_MESSAGE}, e.g. [rock].",
            ),
            "reveal": ("Both players see both hands.\nEach round both claim, ", ""),
        }[self.message_mode]
        return (
            f"You are {agent} in Trust-and-Split, a repeated game with one other player.\n"
            f"Each round there are {c} coins to split. Both players are dealt different rock-paper-scissors hands "
            "(rock beats scissors, scissors beats paper, paper beats rock). The player with the winning hand values "
            f"each coin at {hi:g} points, the other at {lo:g} point{'s' if lo != 1 else ''}. "
            + rounds
            + f"simultaneously, a number of coins from 0 to {c}. If the claims add up to more than {c}, they are scaled "
            f"down in proportion: you get {c} x (your claim) / (sum of claims). Your points = coins you get x your coin value.\n"
            "After each round both hands and both claims are revealed.\n"
            f"{self.horizon.text()}\n"
            "Your goal: as many points as possible in total over all rounds.\n"
            + f"When claiming, answer with a number of coins, e.g. [{c // 2}]."
            + answer
        )

    def state_text(self, agent: str) -> str:
        i = self._index[agent]
        totals = [sum(r.points[p] for r in self.results) for p in (0, 1)]
        score = (
            f"Total points so far: you {_num(totals[i])}, the other player {_num(totals[1 - i])}."
        )
        if self._over(agent):
            end = (
                "ended early after an illegal move"
                if "illegal_move" in self.infos.get(agent, {})
                else "is over"
            )
            return f"The game {end} after {len(self.results)} rounds. {score}"
        r = len(self.results)
        recent = self.results[r - min(r, self.state_rounds) :]
        past = [
            f"{rounds_ago(len(recent) - j)}: {self.describe_round(i, res)}"
            for j, res in enumerate(recent)
        ]
        if self.state_progress:
            lines = [
                f"{self.horizon.round_text(r + 1)}. Your hand: {self.hands[i]}. {score}",
                *past,
            ]
        else:
            lines = [*past, f"Your hand: {self.hands[i]}."]
        if self.phase == "message":
            first = r % 2 == i
            lines.append(f"Message phase: you speak {'first' if first else 'second'}.")
            if not first and self.messages[-1]:  # the first speaker's message
                lines.append(self.said(i, *self.messages[-1][0]))
            if agent == self.agent_selection:
                lines.append(
                    "Name a hand to the other player, or nothing."
                    if self.message_mode == "hand"
                    else "Write your message to the other player."
                )
        elif i in self._claims:
            lines.append(
                f"You claimed {self._claims[i]} coins; waiting for the other player's claim."
            )
        else:
            if self.message_mode != "reveal":
                lines += [self.said(i, p, text) for p, text in self.messages[-1]]
            else:
                won = "wins" if self.value(i) > self.value(1 - i) else "loses"
                lines.append(f"The other player's hand: {self.hands[1 - i]}; yours {won}.")
            lines.append(f"Claim phase: how many of the {self.coins} coins do you claim?")
        return "\n".join(lines)

    def heard(self, i: int, speaker: int, text: str) -> str:
        """A message as player `i` gets it: "" when it is the other's and messages are blanked."""
        return "" if self.blank_messages and speaker != i else text

    def said(self, i: int, speaker: int, text: str) -> str:
        """One message of this round as `i` reads it (`heard`)."""
        who = "You" if speaker == i else "The other player"
        text = self.heard(i, speaker, text)
        return f'{who} said: "{text}"' if text else f"{who} said nothing."

    def describe_round(self, i: int, res: RoundResult) -> str:
        """A resolved round in one sentence, as player `i` reads it."""
        won = "won" if res.values[i] > res.values[1 - i] else "lost"
        return (
            f"your hand {won} ({res.hands[i]} against {res.hands[1 - i]}); "
            f"you claimed {res.claims[i]}, the other claimed {res.claims[1 - i]}."
        )

    def history_text(self, agent: str) -> list[str]:
        i = self._index[agent]
        who = {i: "you", 1 - i: "the other player"}
        lines = []
        for k, msgs in enumerate(self.messages, 1):
            for p, text in msgs:
                text = self.heard(i, p, text)
                lines.append(
                    f'Round {k}: {who[p]} said: "{text}"'
                    if text
                    else f"Round {k}: {who[p]} sent no message"
                )
            if k <= len(self.results):
                res = self.results[k - 1]
                lines.append(
                    f"Round {k} result: your hand {res.hands[i]} (coin value {res.values[i]:g}), the other's hand "
                    f"{res.hands[1 - i]} (coin value {res.values[1 - i]:g}); you claimed {res.claims[i]}, the other "
                    f"claimed {res.claims[1 - i]}; you got {_num(res.coins[i])} coins = {_num(res.points[i])} points, "
                    f"the other {_num(res.coins[1 - i])} coins = {_num(res.points[1 - i])} points"
                )
        return lines


def _num(x: float) -> str:
    return f"{round(x, 2):g}"


def _check_hands(hands: Any) -> list[tuple[str, str]]:
    out = []
    for pair in hands:
        if len(pair) != 2 or pair[0] not in HANDS or pair[1] not in HANDS or pair[0] == pair[1]:
            raise ValueError(
                f"hands must be pairs of two different hands from {HANDS}, got {pair!r}"
            )
        out.append((pair[0], pair[1]))
    return out


def env(**params) -> TrustAndSplit:
    return TrustAndSplit(**params)
