"""Hanabi on OpenSpiel's rules (`pyspiel` game `hanabi`, two players, cooperative).

Presets    (`preset=`, MARS's configurations; any OpenSpiel hanabi parameter overrides)
           "mini"  (catalogue `hanabi_mini`, train):  2 colours x 2 ranks, hand 3,
                   3 info tokens, 3 life tokens (MARS MiniHanabi, its training game);
           "small" (catalogue `hanabi`, held-out):    3 colours x 2 ranks, hand 5,
                   8 info tokens, 3 life tokens (MARS SimpleHanabi).
Rules      A deck of coloured cards: per colour three 1s, two of each middle rank and one
           of the top rank. Each player holds a hand they cannot see, but sees the
           partner's hand. Players take turns (player_0 first) and either play a card
           (it succeeds if it is the next rank of its colour's firework, else a life
           token is lost and the card is discarded), discard a card (regains an info
           token), or spend an info token on a hint: all of the partner's cards of one
           colour, or of one rank, are pointed out. Played and discarded cards are
           replaced from the deck. The game ends when all fireworks are complete, when
           the last life token is lost, or one round after the deck runs out.
Moves      "Discard card i", "Play card i" (i = 1..hand size, left to right),
           "Hint <Colour> to player_j", "Hint rank r to player_j"; action ids are
           OpenSpiel's ((Discard i-1), (Play i-1), (Reveal player +1 color C),
           (Reveal player +1 rank r)).
Observation  OpenSpiel's observation tensor (card-knowledge encoding) and an action mask.
Rewards    shared: +1 per card played successfully; losing the last life token takes the
           whole score back (total 0). An illegal action: -1 to the offender, 0 to the
           other, game over.
Text       the player sees tokens, fireworks, deck size, discards, the partner's cards
           (with what the partner knows about them) and only the hint knowledge about
           its own cards; the history lists every move with its public outcome, e.g.
               player_1: Play card 2 -> Y1, added to the Yellow firework.
               you: Hint rank 1 to player_1 -> their cards 1, 3.
"""

from __future__ import annotations

import re

from games.openspiel_env import OpenSpielEnv

PRESETS = {
    "mini": dict(
        players=2, colors=2, ranks=2, hand_size=3, max_information_tokens=3, max_life_tokens=3
    ),
    "small": dict(
        players=2, colors=3, ranks=2, hand_size=5, max_information_tokens=8, max_life_tokens=3
    ),
}
COLORS = {"R": "Red", "Y": "Yellow", "G": "Green", "W": "White", "B": "Blue"}
_ACTION = re.compile(r"\((Discard|Play) (\d+)\)|\(Reveal player \+1 (color|rank) (\w)\)")


def parse_observation(text: str) -> dict:
    """OpenSpiel's hanabi observation string as fields. Hands are lists of (card, knowledge)
    per player, starting with the observer's own (shown as XX), in seat order after it."""
    out: dict = {"hands": [[]]}
    lines = text.splitlines()
    in_hands = False
    for line in lines:
        line = line.strip()
        if line.startswith("Life tokens:"):
            out["life"] = int(line.split(":")[1])
        elif line.startswith("Info tokens:"):
            out["info"] = int(line.split(":")[1])
        elif line.startswith("Fireworks:"):
            out["fireworks"] = line.split(":")[1].split()
        elif line == "Hands:":
            in_hands = True
        elif line.startswith("Deck size:"):
            in_hands = False
            out["deck"] = int(line.split(":")[1])
        elif line.startswith("Discards:"):
            out["discards"] = line.split(":")[1].split()
        elif in_hands and line == "-----":
            out["hands"].append([])
        elif in_hands and "||" in line:
            card, knowledge = (s.strip() for s in line.split("||"))
            out["hands"][-1].append((card, knowledge))
    return out


class Hanabi(OpenSpielEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "hanabi", "is_parallelizable": False}

    def __init__(
        self,
        preset: str = "mini",
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
        **params,
    ):
        if preset not in PRESETS:
            raise ValueError(f"unknown hanabi preset {preset!r}; choose one of {sorted(PRESETS)}")
        params = {**PRESETS[preset], **params}
        if params["players"] != 2:
            raise ValueError(
                "the hanabi text game is two-player; use 'openspiel:hanabi' for more players"
            )
        super().__init__("hanabi", render_mode=render_mode, illegal_reward=illegal_reward, **params)
        self.preset = preset
        p = self.game.get_parameters()
        self.colors = list(COLORS)[: p["colors"]]
        self.ranks, self.hand_size = p["ranks"], p["hand_size"]
        self.max_info, self.max_life = p["max_information_tokens"], p["max_life_tokens"]
        start = self.game.new_initial_state()
        self._actions = [
            _ACTION.fullmatch(start.action_to_string(0, a)).groups()
            for a in range(self.num_actions)
        ]

    # --- text rendering ----------------------------------------------------------------
    def _copies(self, rank: int) -> int:
        return 3 if rank == 1 else 1 if rank == self.ranks else 2

    def _possible(self, knowledge: str) -> str:
        """'XX|RY12' (hinted colour/rank, then possible colours and ranks) as words."""
        possible = knowledge.split("|")[1]
        colors = [COLORS[c] for c in possible if c.isalpha()]
        ranks = [c for c in possible if c.isdigit()]
        return f"{' or '.join(colors)}, rank {' or '.join(ranks)}"

    def rules_text(self, agent: str) -> str:
        me = self._index[agent]
        c, r = len(self.colors), self.ranks
        counts = ", ".join(f"{self._copies(k)} of rank {k}" for k in range(1, r + 1))
        names = ", ".join(f"{COLORS[x]} ({x})" for x in self.colors)
        return (
            f"Hanabi, a cooperative card game for two players (player_0 and player_1) who share one score.\n"
            f"The deck has {c} colours: {names}, with ranks 1 to {r}; each colour has {counts} "
            f"({c * sum(self._copies(k) for k in range(1, r + 1))} cards). A card is written colour letter + rank, e.g. "
            f"{self.colors[0]}1 = {COLORS[self.colors[0]]} 1.\n"
            f"Each player holds {self.hand_size} cards. You cannot see your own cards, but you see your partner's. "
            f"The team has {self.max_info} info tokens and {self.max_life} life tokens.\n"
            f"Goal: build one firework per colour by playing its cards in rank order, 1 up to {r}.\n"
            "On your turn do exactly one of:\n"
            "- Play card i: if it is the next rank of its colour's firework it is added (+1 to the score); "
            "otherwise it is discarded and the team loses a life token.\n"
            f"- Discard card i: the card goes to the discard pile and the team regains an info token "
            f"(only when fewer than {self.max_info} are left).\n"
            "- Hint: spend an info token to point out to your partner all of their cards of one colour "
            "(Hint Red to player_1) or of one rank (Hint rank 1 to player_1).\n"
            "After playing or discarding you draw a new card while the deck lasts. Cards are numbered 1, 2, ... "
            "from left to right; the new card goes to the right end.\n"
            f"The game ends when all fireworks are complete (score {c * r}), when the last life token is lost "
            "(the score then drops to 0), or after one more turn each once the deck is empty.\n"
            "Your reward is the team score: +1 for each card played successfully.\n"
            f"You are {agent}; your partner is {self.possible_agents[1 - me]}."
        )

    def state_text(self, agent: str) -> str:
        me = self._index[agent]
        if self.state.is_terminal():
            score = self.state.returns()[me]
            return f"The game is over. Team score: {score:g}."
        obs = parse_observation(self.state.observation_string(me))
        fireworks = ", ".join(f"{COLORS[f[0]]} {f[1:]}" for f in obs["fireworks"])
        partner = self.possible_agents[1 - me]
        lines = [
            f"Life tokens: {obs['life']} of {self.max_life}. Info tokens: {obs['info']} of {self.max_info}.",
            f"Fireworks (highest rank played per colour, 0 = none yet): {fireworks}.",
            f"Deck: {obs['deck']} cards left. Discard pile: {' '.join(obs['discards']) or 'empty'}.",
            f"{partner}'s hand (you see it; they do not):",
        ]
        for i, (card, knowledge) in enumerate(obs["hands"][1], 1):
            lines.append(f"  card {i}: {card} (they know: {self._possible(knowledge)})")
        lines.append("Your hand (you cannot see it; what the hints tell you):")
        for i, (_, knowledge) in enumerate(obs["hands"][0], 1):
            lines.append(f"  card {i}: {self._possible(knowledge)}")
        turn = self.state.current_player()
        lines.append("Your turn." if turn == me else f"{self.possible_agents[turn]} is to move.")
        return "\n".join(lines)

    def move_text(self, agent: str, action: int) -> str:
        kind, index, hint, value = self._actions[int(action)]
        if kind:
            return f"{kind} card {int(index) + 1}"
        target = self.possible_agents[(self._index[agent] + 1) % 2]
        return (
            f"Hint {COLORS[value]} to {target}"
            if hint == "color"
            else f"Hint rank {value} to {target}"
        )

    def history_text(self, agent: str) -> list[str]:
        """Every move with its public outcome (played/discarded card, cards a hint touched)."""
        me = self._index[agent]
        lines, replay = [], self.game.new_initial_state()
        for player, action in self.moves:
            if player < 0:
                replay.apply_action(action)
                continue
            # The full state lists hands in seat order; its cards are only used to describe
            # what the move made public (the card played, the cards a hint points out).
            before = parse_observation(str(replay))
            kind, index, hint, value = self._actions[action]
            who = "you" if player == me else self.possible_agents[player]
            move = self.move_text(self.possible_agents[player], action)
            replay.apply_action(action)
            if kind:
                card = before["hands"][player][int(index)][0]
                if kind == "Discard":
                    outcome = f"{card} discarded, +1 info token"
                elif parse_observation(str(replay))["life"] < before["life"]:
                    outcome = f"{card} did not fit; discarded and a life token lost"
                else:
                    outcome = f"{card} added to the {COLORS[card[0]]} firework"
            else:
                target = (player + 1) % 2
                touched = [
                    str(i)
                    for i, (card, _) in enumerate(before["hands"][target], 1)
                    if (card[0] if hint == "color" else card[1]) == value
                ]
                whose = "your" if target == me else "their"
                move = move.replace(f"to {self.possible_agents[me]}", "to you")
                outcome = f"{whose} card{'s' if len(touched) > 1 else ''} {', '.join(touched)}"
            lines.append(f"{who}: {move} -> {outcome}.")
        return lines


def env(**kwargs) -> Hanabi:
    return Hanabi(**kwargs)
