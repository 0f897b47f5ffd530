"""Codewords: two teams of two, a clue-giver and a guesser each, find their words on a grid.

In the manner of Codenames (Vlaada Chvátil), text-native, for four players.

Rules      Teams red (player_0 gives clues, player_1 guesses) and blue (player_2 gives clues,
           player_3 guesses). 25 words drawn from the shipped word list lie in a 5x5 grid.
           A secret key gives each word to the starting team (9 words), the other team (8),
           nobody (7 neutral words) or the assassin (1). Both clue-givers see the key; the
           guessers see only the words and what has been revealed.
           The teams take turns, the starting team first. A turn: the clue-giver gives a
           clue, ONE word and a number N in 1..9 ("animal 2": about N of its team's words).
           Then the guesser reveals grid words one at a time, at most N + 1 of them: a word
           of its own team lets it go on; a neutral word or one of the other team's ends the
           turn (the other team's word counts for them); the assassin loses the game for the
           guessing team at once. After its first guess the guesser may pass. A team whose
           words are all revealed wins, whoever revealed the last one. After `max_turns`
           turns (both teams' turns counted) without a winner the game is a draw.
Clue rule  The clue word is letters only (a-z, at most 24), compared with the grid words
           case-insensitively: it is none of the 25 grid words (revealed ones included), no
           grid word contains it and it contains no grid word ("bear" rules out "be",
           "bears" and "beard"). This catches plurals and most other forms of a grid word by
           their shared prefix; forms that change the stem ("mice" for "mouse") pass.
Void clue  A clue that breaks the rules (or a message that is no clue at all) is void and
           counts as a clue-rule violation (`violations[team]`): the turn goes on without a
           clue, and the guesser may guess one word or pass at once. The guesser learns only
           that the clue was void, never its text (a void clue carries no message to the
           partner). `parse` rejects such a reply first (`ParseError`), so a language model
           is asked again (its agent's retries); a void clue reaches the game only through
           an agent's fallback or a scripted agent. The masked-in discrete action `NO_CLUE`
           gives a void clue without a violation (random and RL play).
Moves      clue phase: free text (`is_free_text(agent)` is True; the arena sends the parsed
           clue, a `str`, as the action). `parse` reads the clue strictly: the reply without
           its `<think>` blocks, from its explicit format if it has one (`<answer>`,
           `\\boxed{}`, `[...]`; see `games.parsing.explicit_answer`), else the whole reply,
           must be `WORD N` (a comma or colon may follow the word) with the word legal on
           this grid; it returns the canonical `"word n"`. Anything else is a `ParseError`:
           `no_move` (not shaped like a clue), `illegal` (a grid word, N out of range),
           `too_long` (over 20,000 characters).
           guess phase: the unrevealed grid words and, once allowed, "pass"; parsed like
           every choice move (`games.parsing.parse_move`).
Action space  `Discrete(27)`: 0..24 reveal grid cell k (row-major), 25 = `PASS`, 26 =
           `NO_CLUE` (the only masked-in action of a clue phase). A gymnasium `Text` space
           is not used, so that PettingZoo's `api_test` and `seed_test` can sample every
           phase with the action mask (as in `games.trust_and_split`).
Observation  `{"observation": float32[206], "action_mask": int8[27]}`: per cell, what it
           was revealed as (one-hot red, blue, neutral, assassin; zeros while hidden), then
           per cell the key (same one-hot; clue-givers only, zeros for guessers), then:
           guess phase, own team to play, guesses left, the clue's number, own role is
           clue-giver, own team is red. Words are in the text layer only.
Rewards    at the end: +1 to both players of the winning team, -1 to both of the other;
           0 to all on a draw. Illegal action (outside the mask, an `int` in place of a
           clue string's phase and so on): `illegal_reward` to the offender, 0 to the
           others, game over.
State text  the player's team and role, the words each team has left, the grid (revealed
           words show whose they were), for a clue-giver the key by kind, the current clue
           and the guesses left; the history lists every clue and guess.
Dynamics   sequential; turns alternate between the teams. `roles` (agent -> "clue_giver" or
           "guesser") and `teams` (agent -> "red" or "blue") name the seats.
Params     first="red" (the team that starts and has 9 words; "blue"), max_turns=30,
           word_pool=0 (draw the grid from the first `word_pool` words of the list, at
           least 25; 0: the whole list), illegal_reward=-1. `reset(options={"words": [25
           words], "key": [25 kinds]})` fixes the grid and the key (tests, evaluation).
Word list  `games/data/codewords.txt` (package data): 334 common nouns, each with 2-4
           association tags (animal, metal, music, ...). No tag is a word of the list, nor
           a part of one, so every tag is a legal clue on any grid.
Bots       (`agents.codewords_bots`) `codewords_tags`: as clue-giver, the tag carried by the
           most of its team's unrevealed words and by no unrevealed assassin word (tags no
           opponent word carries first), with that count; as guesser (it knows the tags,
           not the key), the unrevealed words carrying the clue's tag, at most N, then pass.
           `codewords_random`: a uniformly drawn tag with number 1; uniformly drawn guesses
           (passing is one of the choices after the first).

Playing codewords: `arena play codewords --agents codewords_tags codewords_tags
codewords_tags codewords_random --matches 8` (seats rotate through the agents), `arena eval
--agent codewords_tags --games codewords --opponents codewords_random --matches 8` (the
agent plays both seats of a team, the opponent bot the other team; `teams` declares them),
and `arena tournament configs/tournament_codewords.yaml` (teammates share their result:
players are rated through their teams' finishing order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
from gymnasium import spaces

from games.parsing import ParseError, explicit_answer, normalize, strip_thinking
from games.repeated_matrix import int_action
from games.text_env import TextEnv

TEAMS = ("red", "blue")
KINDS = ("red", "blue", "neutral", "assassin")
ROLES = ("clue_giver", "guesser")
SEATS = {  # agent -> (team, role)
    "player_0": ("red", "clue_giver"),
    "player_1": ("red", "guesser"),
    "player_2": ("blue", "clue_giver"),
    "player_3": ("blue", "guesser"),
}
GRID = 25
PASS, NO_CLUE = GRID, GRID + 1
NUM_ACTIONS = GRID + 2
MAX_NUMBER = 9
MAX_WORD = 24
MAX_REPLY = 20_000
OBS_SIZE = 2 * 4 * GRID + 6
_CLUE = re.compile(r"([a-z]+)(?:\s*[,:]\s*|\s+)(\d+)")


@lru_cache(maxsize=1)
def word_list() -> dict[str, tuple[str, ...]]:
    """The shipped word list: grid word -> its association tags, in file order."""
    text = resources.files("games").joinpath("data/codewords.txt").read_text(encoding="utf-8")
    return read_word_list(text)


def read_word_list(text: str) -> dict[str, tuple[str, ...]]:
    """`word: tag tag ...` lines (blank lines and `#` comments skipped) as a dict."""
    out: dict[str, tuple[str, ...]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, colon, tags = line.partition(":")
        if not colon or not word.strip().isalpha() or not tags.split():
            raise ValueError(f"codewords word list line {n} must be 'word: tag tag ...'")
        out[word.strip().lower()] = tuple(t.lower() for t in tags.split())
    return out


def all_tags() -> list[str]:
    """Every tag of the word list, each once, in order of first use."""
    return list(dict.fromkeys(t for tags in word_list().values() for t in tags))


def clue_problem(word: str, number: int, grid: list[str]) -> str | None:
    """Why `word number` is not a legal clue on `grid` (one line), or None when it is."""
    if not word.isascii() or not word.isalpha() or len(word) > MAX_WORD:
        return f"the clue word must be letters a-z only, at most {MAX_WORD}, got {word!r}"
    if not 1 <= number <= MAX_NUMBER:
        return f"the clue number must be 1 to {MAX_NUMBER}, got {number}"
    w = word.lower()
    for g in grid:
        if w == g:
            return f"{w!r} is a word of the grid"
        if w in g:
            return f"{w!r} is part of the grid word {g!r}"
        if g in w:
            return f"{w!r} contains the grid word {g!r}"
    return None


def read_clue(reply: str, grid: list[str]) -> tuple[str, int]:
    """(word, number) of the clue a reply gives on `grid`; `ParseError` when it gives none."""
    if reply is not None and len(reply) > MAX_REPLY:
        raise ParseError("too_long", f"the reply has {len(reply)} characters (limit {MAX_REPLY})")
    inner = explicit_answer(reply or "")
    text = normalize(strip_thinking(reply or "") if inner is None else inner)
    if not text:
        raise ParseError("empty", "the clue is empty")
    m = _CLUE.fullmatch(text) if len(text) <= 2 * MAX_WORD else None
    if m is None:
        shown = " ".join(text.split())[:40]
        raise ParseError(
            "no_move", f"a clue is one word and a number, e.g. animal 2; got {shown!r}"
        )
    word, number = m.group(1), int(m.group(2))
    problem = clue_problem(word, number, grid)
    if problem:
        raise ParseError("illegal", problem)
    return word, number


@dataclass
class Turn:
    """One team's turn: its clue (None: void) and the guesses, as (cell, kind revealed)."""

    team: str
    clue: tuple[str, int] | None
    violation: str = ""  # why the clue was void ("" when it was valid or NO_CLUE)
    guesses: list[tuple[int, str]] = field(default_factory=list)
    passed: bool = False


class Codewords(TextEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "codewords", "is_parallelizable": False}
    ROLES = ROLES
    TEAMS = TEAMS

    def __init__(
        self,
        first: str = "red",
        max_turns: int = 30,
        word_pool: int = 0,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        if first not in TEAMS:
            raise ValueError(f"first must be red or blue, got {first!r}")
        if not isinstance(max_turns, (int, np.integer)) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        size = len(word_list())
        if not isinstance(word_pool, (int, np.integer)) or not (
            word_pool == 0 or GRID <= word_pool <= size
        ):
            raise ValueError(f"word_pool must be 0 or {GRID} to {size}, got {word_pool!r}")
        self.first, self.max_turns = first, int(max_turns)
        self.pool = list(word_list())[: word_pool or size]
        self.max_message_chars = 2 * MAX_WORD
        self.possible_agents = list(SEATS)
        self.roles = {a: role for a, (_, role) in SEATS.items()}
        self.teams = {a: team for a, (team, _) in SEATS.items()}
        obs = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (OBS_SIZE,), np.float32),
                "action_mask": spaces.Box(0, 1, (NUM_ACTIONS,), np.int8),
            }
        )
        self.observation_spaces = {a: obs for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(NUM_ACTIONS) for a in self.possible_agents}
        self.words: list[str] = []
        self.key: list[str] = []
        self.revealed: list[bool] = [False] * GRID
        self.turns: list[Turn] = []
        self.violations = {t: 0 for t in TEAMS}
        self.winner: str | None = None
        self.end: str = ""  # "words", "assassin", "max_turns" or "" while playing

    # --- AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        options = options or {}
        if "words" in options or "key" in options:
            self.words, self.key = _check_board(options.get("words"), options.get("key"))
        else:
            idx = self.np_random.choice(len(self.pool), size=GRID, replace=False)
            self.words = [self.pool[int(i)] for i in idx]
            second = TEAMS[1 - TEAMS.index(self.first)]
            kinds = [self.first] * 9 + [second] * 8 + ["neutral"] * 7 + ["assassin"]
            self.key = [kinds[int(i)] for i in self.np_random.permutation(GRID)]
        self.revealed = [False] * GRID
        self.turns, self.violations = [], {t: 0 for t in TEAMS}
        self.winner, self.end = None, ""
        self.roles = {a: role for a, (_, role) in SEATS.items()}
        self.teams = {a: team for a, (team, _) in SEATS.items()}
        self._start_episode()
        self._new_turn(self.first)

    def _new_turn(self, team: str) -> None:
        self.turns.append(Turn(team, None))
        self.phase = "clue"
        self.agent_selection = self.seat(team, "clue_giver")

    @staticmethod
    def seat(team: str, role: str) -> str:
        """The agent that plays `role` for `team`."""
        return next(a for a, s in SEATS.items() if s == (team, role))

    @property
    def turn(self) -> Turn:
        """The turn being played (the last one once the game is over)."""
        return self.turns[-1]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        if self.phase == "clue":
            if isinstance(action, str):
                self._give_clue(action)
            elif int_action(action, NUM_ACTIONS) == NO_CLUE:
                self.turn.clue = None
            else:
                return self._illegal(agent, action)
            self.phase = "guess"
            self.agent_selection = self.seat(self.turn.team, "guesser")
            return
        a = None if isinstance(action, str) else int_action(action, NUM_ACTIONS)
        if a is None or a not in self.legal_actions(agent):
            return self._illegal(agent, action)
        if a == PASS:
            self.turn.passed = True
            return self._end_turn()
        self._reveal(a)

    def _give_clue(self, text: str) -> None:
        try:
            self.turn.clue = read_clue(text, self.words)
        except ParseError as e:
            self.turn.clue, self.turn.violation = None, e.message
            self.violations[self.turn.team] += 1

    def _reveal(self, cell: int) -> None:
        team, kind = self.turn.team, self.key[cell]
        self.revealed[cell] = True
        self.turn.guesses.append((cell, kind))
        other = TEAMS[1 - TEAMS.index(team)]
        if kind == "assassin":
            return self._finish(other, "assassin")
        for t in TEAMS:
            if self.words_left(t) == 0:
                return self._finish(t, "words")
        if kind != team or len(self.turn.guesses) >= self.max_guesses():
            self._end_turn()

    def max_guesses(self) -> int:
        """Guesses this turn allows: N + 1 after a clue, 1 after a void clue."""
        return 1 if self.turn.clue is None else self.turn.clue[1] + 1

    def _end_turn(self) -> None:
        if len(self.turns) >= self.max_turns:
            return self._finish(None, "max_turns")
        self._new_turn(TEAMS[1 - TEAMS.index(self.turn.team)])

    def _finish(self, winner: str | None, how: str) -> None:
        self.winner, self.end = winner, how
        self._end_episode(
            {
                a: 0.0 if winner is None else (1.0 if t == winner else -1.0)
                for a, t in self.teams.items()
            }
        )
        self._accumulate_rewards()

    def words_left(self, team: str) -> int:
        """Words of `team` not yet revealed."""
        return sum(k == team and not r for k, r in zip(self.key, self.revealed))

    def legal_actions(self, agent: str | None = None) -> list[int]:
        agent = agent or self.agent_selection
        if self._over(agent) or agent != self.agent_selection:
            return []
        if self.phase == "clue":
            return [NO_CLUE]
        cells = [k for k in range(GRID) if not self.revealed[k]]
        may_pass = self.turn.guesses or self.turn.clue is None
        return cells + [PASS] if may_pass else cells

    def is_free_text(self, agent: str) -> bool:
        return not self._over(agent) and self.phase == "clue" and agent == self.agent_selection

    def parse(self, agent: str, reply: str) -> Any:
        """A clue phase: the clue as `"word n"` (see the module doc); else a guess."""
        if self.is_free_text(agent):
            word, number = read_clue(reply, self.words)
            return f"{word} {number}"
        return super().parse(agent, reply)

    def move_text(self, agent: str, action: Any) -> str:
        if isinstance(action, str):
            return action
        a = int(action)
        return "pass" if a == PASS else "(no clue)" if a == NO_CLUE else self.words[a]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        obs = np.zeros(OBS_SIZE, np.float32)
        giver = self.roles[agent] == "clue_giver"
        for k, kind in enumerate(self.key):
            if self.revealed[k]:
                obs[4 * k + KINDS.index(kind)] = 1.0
            if giver:
                obs[4 * GRID + 4 * k + KINDS.index(kind)] = 1.0
        tail = 8 * GRID
        if self.turns:
            obs[tail] = float(self.phase == "guess")
            obs[tail + 1] = float(self.turn.team == self.teams[agent])
            clue = self.turn.clue
            if self.phase == "guess":
                obs[tail + 2] = self.max_guesses() - len(self.turn.guesses)
            obs[tail + 3] = clue[1] if clue else 0.0
        obs[tail + 4] = float(giver)
        obs[tail + 5] = float(self.teams[agent] == "red")
        mask = np.zeros(NUM_ACTIONS, np.int8)
        mask[self.legal_actions(agent)] = 1
        return {"observation": obs, "action_mask": mask}

    # --- text layer --------------------------------------------------------------------
    def rules_text(self, agent: str) -> str:
        team, role = SEATS[agent]
        second = TEAMS[1 - TEAMS.index(self.first)]
        how = (
            "When it is your turn to give a clue, write just the clue, e.g. animal 2."
            if role == "clue_giver"
            else "When guessing, answer with one word of the grid, or pass, e.g. [pass]."
        )
        return (
            f"You are {agent}, the {role.replace('_', '-')} of the {team} team in Codewords, a word game "
            "of two teams of two (red: player_0 gives clues, player_1 guesses; blue: player_2 gives clues, "
            "player_3 guesses).\n"
            f"25 words lie in a 5x5 grid. A secret key gives 9 of them to {self.first} (who plays first), "
            f"8 to {second}, 7 to nobody (neutral) and 1 to the assassin. The clue-givers see the key; "
            "the guessers do not.\n"
            "The teams take turns. In a turn the clue-giver gives a clue: one word and a number from 1 to "
            f"{MAX_NUMBER}, e.g. animal 2, meaning about that many of the team's words. The clue word must be "
            "letters only, not a word of the grid, not part of a grid word and not containing one. "
            "Then the guesser reveals grid words one at a time, at most the number + 1: a word of its own team "
            "lets it go on; a neutral word or the other team's word ends the turn (the other team's word "
            "counts for them); the assassin loses the game for the guessing team at once. After the first "
            "guess the guesser may pass. A clue that breaks the rules is void: the guesser is told only "
            "that, and may guess one word or pass.\n"
            "A team whose words are all revealed wins. "
            f"After {self.max_turns} turns (both teams' counted) without a winner the game is a draw.\n"
            "Your goal: win with your teammate (+1 to both; a loss is -1 to both, a draw 0).\n"
            + how
        )

    def state_text(self, agent: str) -> str:
        team, role = SEATS[agent]
        lines = [
            f"You are {agent}, the {team} team's {role.replace('_', '-')}. "
            f"Words left to find: red {self.words_left('red')}, blue {self.words_left('blue')}.",
            "Grid (revealed words show whose they were):",
            *self._grid_rows(),
        ]
        if role == "clue_giver":
            lines += self._key_lines(team)
        if self._over(agent):
            lines.append(self._ending())
            return "\n".join(lines)
        lines.append(self._now(agent))
        return "\n".join(lines)

    def _grid_rows(self) -> list[str]:
        cells = [f"{w} ({k})" if r else w for w, k, r in zip(self.words, self.key, self.revealed)]
        return ["  " + ", ".join(cells[i : i + 5]) for i in range(0, GRID, 5)]

    def _key_lines(self, team: str) -> list[str]:
        """The key's unrevealed words by kind, as a clue-giver sees them."""
        other = TEAMS[1 - TEAMS.index(team)]
        names = {team: "Your team's", other: "The other team's", "neutral": "Neutral"}

        def left(kind: str) -> str:
            return ", ".join(
                w for w, k, r in zip(self.words, self.key, self.revealed) if k == kind and not r
            )

        out = ["The key (the clue-givers see it, the guessers do not):"]
        out += [f"  {names[k]} words: {left(k) or '(none)'}" for k in (team, other, "neutral")]
        out.append(f"  The assassin: {left('assassin') or '(revealed)'}")
        return out

    @staticmethod
    def _clue_line(turn: Turn) -> str:
        return "no valid clue" if turn.clue is None else f"clue {turn.clue[0]} {turn.clue[1]}"

    def _now(self, agent: str) -> str:
        team, role = SEATS[agent]
        turn = self.turn
        if self.phase == "clue":
            if agent == self.agent_selection:
                return "Your turn: give a clue, one word and a number, e.g. animal 2."
            return f"Waiting for the {turn.team} clue-giver's clue."
        left = self.max_guesses() - len(turn.guesses)
        said = f"The {turn.team} team has {self._clue_line(turn)}; {len(turn.guesses)} guessed, {left} guess(es) left."
        if agent != self.agent_selection:
            return said + f" Waiting for the {turn.team} guesser."
        may_pass = " or pass" if PASS in self.legal_actions(agent) else ""
        return said + f" Your turn: guess a word of the grid{may_pass}."

    def _ending(self) -> str:
        if "illegal_move" in next(iter(self.infos.values()), {}):
            return "The game ended early after an illegal move."
        if self.winner is None:
            return f"The game is over: a draw after {self.max_turns} turns."
        how = (
            "the other team revealed the assassin"
            if self.end == "assassin"
            else "all its words are revealed"
        )
        return f"The game is over: {self.winner} wins ({how})."

    def history_text(self, agent: str) -> list[str]:
        me, _ = SEATS[agent]
        lines = []
        for k, turn in enumerate(self.turns, 1):
            if turn.clue is None and self.turn is turn and self.phase == "clue":
                break  # the clue of the turn being played is not given yet
            line = f"Turn {k} ({turn.team}): {self._clue_line(turn)}"
            if turn.violation and agent == self.seat(turn.team, "clue_giver"):
                line += f" (your clue was void: {turn.violation})"
            lines.append(line)
            for cell, kind in turn.guesses:
                lines.append(f"Turn {k} ({turn.team}): guessed {self.words[cell]}, a {kind} word")
            if turn.passed:
                lines.append(f"Turn {k} ({turn.team}): passed")
        return lines


def _check_board(words: Any, key: Any) -> tuple[list[str], list[str]]:
    """The `words` and `key` reset options, checked."""
    if not isinstance(words, (list, tuple)) or len(words) != GRID or len(set(words)) != GRID:
        raise ValueError(f"options words must be {GRID} distinct words, got {words!r}")
    if not all(isinstance(w, str) and w.isalpha() and w == w.lower() for w in words):
        raise ValueError("options words must be lower-case words of letters")
    if not isinstance(key, (list, tuple)) or len(key) != GRID or not set(key) <= set(KINDS):
        raise ValueError(f"options key must be {GRID} kinds from {KINDS}, got {key!r}")
    if key.count("assassin") != 1:
        raise ValueError("options key must hold exactly one assassin")
    return list(words), list(key)


def env(**params) -> Codewords:
    return Codewords(**params)
