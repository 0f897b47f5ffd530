"""The game catalogue: `make(name, **params)`, `names()`, `info(name)`.

Every game is a PettingZoo AEC env with a text layer (see `games.text_env`). Games whose
rules OpenSpiel has are built on `pyspiel` (`games.openspiel_env`); text-native games are
ours. Any other OpenSpiel game is reachable as `make("openspiel:<game>", **params)`.

>>> import games
>>> env = games.make("tic_tac_toe")
>>> env.reset(seed=0)
>>> env.unwrapped.view().prompt()  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
from dataclasses import dataclass, field

from pettingzoo.utils.conversions import aec_to_parallel

from games.parsing import ParseError, parse_move
from games.text_env import GameInfo, TextEnv, TextView, seat_groups

__all__ = [
    "make",
    "make_parallel",
    "declared_teams",
    "names",
    "info",
    "symmetry_module",
    "GameInfo",
    "TextEnv",
    "TextView",
    "ParseError",
    "UnknownParameter",
    "parse_move",
]


@dataclass(frozen=True)
class Entry:
    module: str  # module with an `env(**params)` factory
    info: GameInfo
    params: dict = field(default_factory=dict)  # defaults, overridable in make()


def catalogue_entry(
    name, players, information, kind, dynamics, split, source, description, module=None, **params
):
    return name, Entry(
        module or f"games.{name}",
        GameInfo(name, players, information, kind, dynamics, split, source, description),
        params,
    )


CATALOGUE: dict[str, Entry] = dict(
    [
        # OpenSpiel rules (MARS split: train = tic_tac_toe, kuhn_poker, hanabi_mini).
        catalogue_entry(
            "tic_tac_toe",
            2,
            "perfect",
            "competitive",
            "sequential",
            "train",
            "openspiel",
            "3x3 noughts and crosses",
        ),
        catalogue_entry(
            "connect_four",
            2,
            "perfect",
            "competitive",
            "sequential",
            "held_out",
            "openspiel",
            "drop discs, four in a row wins",
        ),
        catalogue_entry(
            "kuhn_poker",
            2,
            "imperfect",
            "competitive",
            "sequential",
            "train",
            "openspiel",
            "3-card poker, one bet",
        ),
        catalogue_entry(
            "leduc_poker",
            2,
            "imperfect",
            "competitive",
            "sequential",
            "held_out",
            "openspiel",
            "6-card poker, two rounds, public card",
        ),
        catalogue_entry(
            "liars_dice",
            2,
            "imperfect",
            "competitive",
            "sequential",
            "extra",
            "openspiel",
            "bid on hidden dice, call liar",
        ),
        catalogue_entry(
            "goofspiel",
            2,
            "perfect",
            "competitive",
            "simultaneous",
            "extra",
            "openspiel",
            "bid cards for prizes, simultaneous",
        ),
        catalogue_entry(
            "hanabi_mini",
            2,
            "imperfect",
            "cooperative",
            "sequential",
            "train",
            "openspiel",
            "cooperative fireworks, 2 colours x 2 ranks",
            module="games.hanabi",
            preset="mini",
        ),
        catalogue_entry(
            "hanabi",
            2,
            "imperfect",
            "cooperative",
            "sequential",
            "held_out",
            "openspiel",
            "cooperative fireworks, standard small",
            module="games.hanabi",
            preset="small",
        ),
        # Text-native social dilemmas and negotiation.
        catalogue_entry(
            "prisoners_dilemma",
            2,
            "perfect",
            "social_dilemma",
            "simultaneous",
            "extra",
            "native",
            "iterated prisoner's dilemma, R=3 P=1 T=5 S=0, 10 rounds",
        ),
        catalogue_entry(
            "stag_hunt",
            2,
            "perfect",
            "social_dilemma",
            "simultaneous",
            "extra",
            "native",
            "iterated stag hunt, 10 rounds",
        ),
        catalogue_entry(
            "chicken",
            2,
            "perfect",
            "social_dilemma",
            "simultaneous",
            "extra",
            "native",
            "iterated chicken (hawk-dove), 10 rounds",
        ),
        catalogue_entry(
            "public_goods",
            4,
            "perfect",
            "social_dilemma",
            "simultaneous",
            "extra",
            "native",
            "4-player public goods, endowment 10, multiplier 1.6, 10 rounds",
        ),
        catalogue_entry(
            "trust_and_split",
            2,
            "imperfect",
            "social_dilemma",
            "mixed",
            "extra",
            "native",
            "hidden RPS hands set coin values; free-text messages, then claim coins; 10 rounds",
        ),
        catalogue_entry(
            "commons",
            4,
            "perfect",
            "social_dilemma",
            "mixed",
            "extra",
            "native",
            "4 fishers share a lake that regrows or collapses; messages, then simultaneous catches; 12 rounds",
        ),
        catalogue_entry(
            "negotiation",
            2,
            "imperfect",
            "general_sum",
            "sequential",
            "extra",
            "native",
            "trade resources with private values: offer, accept, deny; 10 turns",
        ),
        catalogue_entry(
            "simple_negotiation",
            2,
            "imperfect",
            "competitive",
            "sequential",
            "extra",
            "native",
            "SPIRAL's SimpleNegotiation: Wood/Gold, opposite values, win/loss",
            module="games.negotiation",
            preset="spiral",
        ),
        catalogue_entry(
            "werewolf",
            6,
            "imperfect",
            "competitive",
            "mixed",
            "extra",
            "native",
            "hidden roles, night kills, free-text discussion and a vote; wolves vs village, 5-8 players",
        ),
        catalogue_entry(
            "codewords",
            4,
            "imperfect",
            "competitive",
            "sequential",
            "extra",
            "native",
            "two teams of clue-giver and guesser find their words on a 25-word grid; free-text clues",
        ),
    ]
)


def names(split: str | None = None) -> list[str]:
    """Catalogue names, optionally only one split ("train", "held_out", "extra")."""
    return [n for n, e in CATALOGUE.items() if split is None or e.info.split == split]


def _entry(name: str) -> Entry:
    if name in CATALOGUE:
        return CATALOGUE[name]
    close = [n for n in CATALOGUE if len(name) >= 3 and name in n]  # kuhn -> kuhn_poker
    close += [n for n in difflib.get_close_matches(name, list(CATALOGUE), n=3) if n not in close]
    close = close[:3]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown game {name!r}{hint} (see `arena games`, or use 'openspiel:<game>')")


def info(name: str) -> GameInfo:
    """Metadata of a catalogue game, or of an OpenSpiel game via 'openspiel:<game>'."""
    if name.startswith("openspiel:"):
        from games.openspiel_env import openspiel_info  # start-up time: pyspiel

        return openspiel_info(name.split(":", 1)[1])
    return _entry(name).info


class UnknownParameter(ValueError):
    """`make` was given a parameter the game does not have."""


def make(name: str, **params) -> TextEnv:
    """A fresh AEC env for `name` (see `names()`), with game parameters overriding defaults."""
    if name.startswith("openspiel:"):
        from games.openspiel_env import OpenSpielEnv  # start-up time: pyspiel

        return OpenSpielEnv(name.split(":", 1)[1], **params)
    entry = _entry(name)
    module = importlib.import_module(entry.module)
    try:
        env = module.env(**{**entry.params, **params})
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise
        raise UnknownParameter(
            f"{name} has no parameter {str(e).rsplit(' ', 1)[-1]} (see `arena games show {name}`)"
        ) from None
    env.info = entry.info
    return env


def make_parallel(name: str, **params):
    """The Parallel-API version of a simultaneous-move game."""
    env = make(name, **params)
    if not env.metadata.get("is_parallelizable"):
        raise ValueError(f"{name} is not a simultaneous-move game; use make()")
    return aec_to_parallel(env)


def symmetry_module(name: str):
    """The game's module if it declares board symmetries (`SYMMETRIES`, `symmetric_text`,
    `symmetric_move`: e.g. `games.tic_tac_toe`), else None."""
    if name.startswith("openspiel:"):
        return None
    module = importlib.import_module(_entry(name).module)
    return module if hasattr(module, "SYMMETRIES") else None


def declared_teams(name: str, params: dict, seed: int) -> tuple[tuple[int, ...], ...]:
    """The teams a game declares for the match of `seed` (`TextEnv.teams`, drawn at reset, so
    the same seed gives the match's own: werewolf's wolves and village), as groups of seat
    indices (`seat_groups`), in the game's `TEAMS` order (werewolf: the wolves first); () for a
    game without teams. Cached: tournaments and evaluations
    ask for every match they schedule or score."""
    key = json.dumps(params, sort_keys=True)
    return _declared_teams(name, key, seed) if _has_teams(name, key) else ()


@functools.lru_cache(maxsize=64)
def _has_teams(name: str, params: str) -> bool:
    return bool(_declared_teams(name, params, 0))


@functools.lru_cache(maxsize=65536)
def _declared_teams(name: str, params: str, seed: int) -> tuple[tuple[int, ...], ...]:
    env = make(name, **json.loads(params))
    env.reset(seed=seed)
    game = env.unwrapped
    order = getattr(game, "TEAMS", ())
    return seat_groups(getattr(game, "teams", {}), list(env.possible_agents), order)
