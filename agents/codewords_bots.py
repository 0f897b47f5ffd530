"""Scripted codewords players: one bot plays either role of its seat (`games.codewords`).

Both read only what their seat may see: a clue-giver the key, a guesser the grid, what has
been revealed, the clue, and the association tags the word list ships (the tags are part of
the game's package, not of the key).

    codewords_tags     clue-giver: among the tags carried by no unrevealed assassin word, the
                       one carried by the most of its team's unrevealed words, preferring tags
                       no unrevealed opponent word carries, then tags no neutral word carries,
                       then the tag listed first; the clue is that tag and that count (no
                       tag fits: the void `NO_CLUE`). Guesser: the unrevealed words carrying
                       the clue's tag, in grid order, at most the clue's number of them, then
                       pass; with none left before its first guess (a clue that is no tag),
                       a uniformly drawn word; after a void clue, pass.
    codewords_random   clue-giver: a uniformly drawn tag with number 1. Guesser: a uniformly
                       drawn unrevealed word first, then a uniformly drawn legal move (pass
                       among them).

Every draw comes from the turn's per-match generator, so a match replays exactly from its
seed. A bot asked to play another game says so (`WrongGame`) before any match starts.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import games
from agents.base import PendingTurn, WrongGame, decision
from core.records import TurnRecord
from games.codewords import GRID, NO_CLUE, PASS, TEAMS, Codewords, all_tags, word_list

STYLES = ("tags", "random")


class CodewordsBot:
    """An `Agent` that plays codewords in either role, in one of `STYLES`."""

    def __init__(self, name: str = "", style: str = "tags"):
        if style not in STYLES:
            raise ValueError(
                f"codewords bot style must be one of {', '.join(STYLES)}, got {style!r}"
            )
        self.style = style
        self.name = name or f"codewords_{style}"

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) for any game but codewords (before any match starts)."""
        if not isinstance(getattr(games.make(game_name, **params), "unwrapped", None), Codewords):
            raise WrongGame(_refusal(self.name, game_name))

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        return [self._decide(t) for t in turns]

    def _decide(self, turn: PendingTurn) -> TurnRecord:
        env = getattr(turn.env, "unwrapped", turn.env)
        if not isinstance(env, Codewords):
            raise WrongGame(_refusal(self.name, env.metadata.get("name", type(env).__name__)))
        if env.is_free_text(turn.player):
            clue = tag_clue(env, turn.player) if self.style == "tags" else random_clue(env, turn)
            return decision(turn, self.name, clue)
        pick = tag_guess if self.style == "tags" else random_guess
        return decision(turn, self.name, pick(env, turn))

    def end_match(self, match_id: str) -> None:
        pass


def _refusal(name: str, game: str) -> str:
    return f"codewords bot {name!r} cannot play {game!r}: it plays codewords only"


def tag_clue(env: Codewords, player: str) -> str | int:
    """The tag bot's clue for clue-giver `player`: "tag count", or `NO_CLUE` when no tag fits."""
    team = env.teams[player]
    tags = word_list()
    hidden = [(w, k) for w, k, r in zip(env.words, env.key, env.revealed) if not r]
    best, best_key = None, None
    for rank, tag in enumerate(all_tags()):
        carriers = [k for w, k in hidden if tag in tags.get(w, ())]
        mine = carriers.count(team)
        if mine == 0 or "assassin" in carriers:
            continue
        theirs = sum(k in TEAMS and k != team for k in carriers)
        key = (theirs == 0, mine - theirs, "neutral" not in carriers, -rank)
        if best_key is None or key > best_key:
            best, best_key = f"{tag} {mine}", key
    return NO_CLUE if best is None else best


def tag_guess(env: Codewords, turn: PendingTurn) -> int:
    """The tag bot's guess: the next unrevealed word carrying the clue's tag, or pass."""
    legal = env.legal_actions(turn.player)
    clue = env.turn.clue
    if clue is None:
        return PASS
    word, number = clue
    tags = word_list()
    carriers = [
        k for k in range(GRID) if not env.revealed[k] and word in tags.get(env.words[k], ())
    ]
    if carriers and len(env.turn.guesses) < number:
        return carriers[0]
    if PASS in legal:
        return PASS
    cells = [a for a in legal if a != PASS]
    return cells[int(turn.rng.integers(len(cells)))]


def random_clue(env: Codewords, turn: PendingTurn) -> str:
    """A uniformly drawn tag with number 1 (every tag is legal on every grid)."""
    tags = all_tags()
    return f"{tags[int(turn.rng.integers(len(tags)))]} 1"


def random_guess(env: Codewords, turn: PendingTurn) -> int:
    """A uniformly drawn unrevealed word first, then any legal move (pass included)."""
    legal = env.legal_actions(turn.player)
    if not env.turn.guesses:
        legal = [a for a in legal if a != PASS] or legal
    return legal[int(turn.rng.integers(len(legal)))]


# Agent factories by name, as `agents.make_agent` calls them: CODEWORDS_BOTS[name](agent_name).
CODEWORDS_BOTS: dict[str, Callable[..., CodewordsBot]] = {
    f"codewords_{style}": partial(CodewordsBot, style=style) for style in STYLES
}
