"""Tournament configuration: a dataclass and its loader from YAML.

    name: quickstart
    format: single_elimination          # round_robin | swiss | single_elimination | double_elimination | anchor
    format_options: {seeding: anchor, anchor: random}   # or {seeding: ratings, ratings: runs/last/tournament.db}
    players:                            # name -> agent spec, as `agents.make_agent` takes it
      smollm2: {type: llm, model: smollm2-135m, fallback: random}
      random: random
      mcts: mcts:50
      expert:                           # a different agent per game
        by_game: {tic_tac_toe: mcts:200, kuhn_poker: cfr, prisoners_dilemma: tit_for_tat}
    games:                              # every pairing plays each of these
      - tic_tac_toe
      - {name: kuhn_poker, params: {}}
      - {name: connect_four, opening: 4}  # each match opens with 0..4 random moves
    games_per_pairing: 2                # k: games of each game per pairing (best-of-k in elimination)
    seed: 0
    rating: {reference: random, ci: sandwich}
    arena: {concurrency: 16}            # arena options (`ARENA_OPTIONS`: concurrency, max_turns)

A training run's checkpoints enter as one player each: `tiny: {checkpoints: runs/tictactoe_tiny,
temperature: 0}` becomes `tiny@580`, `tiny@600`, ... (every `checkpoints/step_N` the run
kept) and `tiny@best`, all LLM agents with the given options.

An agent spec is a string ("random", "mcts:50", "llm:smollm2-135m") or a mapping with a
`type` (see `agents/__init__.py`); this module checks only its shape, the arena builds it.
`{by_game: {GAME: SPEC, ..., default: SPEC}}` plays each game with its own agent, for bots
that know one game (MCTS needs perfect information, CFR knows poker, tit-for-tat social
dilemmas); every game of the config needs an entry or a `default`.

`opening: K` on a game opens each of its matches with 0..K uniformly random legal moves
(`arena.runner.MatchPlan.opening`), so strong bots also meet in positions their own play
never reaches (two perfect tic-tac-toe players only ever draw). The two seat orders of a
pairing share the seed, so each player plays both sides of the same opening (and deal).
A game without an opening stores no `opening` key, so tournaments created before the
option existed resume unchanged.

Seeding from prior ratings (`seeding: ratings`) takes a mapping {player: rating} or the
path of an earlier tournament's DB, whose Bradley-Terry Elo ratings (of the players both
share; the others are seeded last) are read once and stored with this tournament.

Games of N seats (3 to 10, e.g. `{name: openspiel:kuhn_poker, params: {players: 3}}` or
`public_goods`) are played at tables of N players (`tournaments.tables`): round robin,
Swiss and adaptive; the elimination formats and anchor need two seats. Every game of a
tournament has the same number of seats. `games_per_pairing` is then the games of a table
(per game of the config, seats rotating), N unless given, so each player sits in each
seat once. `teams: [[0, 2], [1, 3]]` on a game makes those seats sides that share a
result (the sum of their returns): players are rated through their teams' finishing order.
A game that declares its own teams (`TextEnv.teams`: codewords' two pairs, werewolf's wolves
and village, drawn each match) is rated by them without the key; the key overrides them.

`sides: true` plays a game of two declared teams one player a side, as a two-player game:
a pairing's player holds every seat of one team (`a`, `a#2`, ... in the match record), the
other player every seat of the other, the teams swapping with the seat order. Every format
works, the elimination brackets included (ArenaRL's seeded elimination between two sides), and
the ratings are Bradley-Terry's with a side term (side 0 = the game's first team).

`games_per_pairing` becomes the format's `games` option (round robin, Swiss, anchor) or
`best_of` (elimination). Malformed input raises a one-line ValueError naming the key. A
round may hold at most `MAX_ROUND_MATCHES` matches (a round is scheduled, stored and
handed to the arena at once): `games_per_pairing: 100000000000` is an error, not a run
that fills the memory.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

import games
from core.typed_config import build, did_you_mean, option
from games.entry import GameEntry
from tournaments.formats import FORMATS, format_options, make_format, resolved_options
from tournaments.plackett_luce import fit_plackett_luce
from tournaments.ratings import bradley_terry
from tournaments.rounds import Finish
from tournaments.store import MatchResult, MatchSpec, Store

NAME_OK = re.compile(r"^[^|\s](?:[^|]*[^|\s])?$")  # no "|" (match-id separator), no outer spaces


GAME_KEYS = ("name", "params", "opening", "teams")  # what a tournament's game entry takes
OPTIONAL_GAME_KEYS = ("opening", "teams")  # stored only when set: older stores resume unchanged
MAX_SEATS = 10
REQUIRED = ("name", "format", "players", "games")
NAME = "a non-empty string"
POSITIVE = "a positive integer"
CI = "'sandwich' or 'bootstrap'"
LEVEL = "a number in (0, 1)"
BOOTSTRAP = "an integer >= 10"
ARENA_OPTIONS = {"concurrency": 16, "max_turns": 2000}  # `arena:` options and their defaults
MAX_ROUND_MATCHES = 100_000  # matches one round may schedule (~1 KB of memory each, all at once)


TEAMS = "a list of lists of seat indices"


@dataclass
class TournamentGame(GameEntry):
    """A game of a tournament: a `games.entry.GameEntry` and the sides its seats form."""

    teams: list = option(factory=list, what=TEAMS)
    """groups of seat indices that share a result (the sum of their returns), e.g. [[0, 2],
    [1, 3]]: every seat in one group, at least two groups; empty: every seat plays for itself"""


@dataclass
class RatingOptions:
    """How a leaderboard's Bradley-Terry ratings are computed."""

    reference: str | None = None
    """player pinned at 1000 Elo; None: the field's mean at 1000"""
    ci: str = option("sandwich", what=CI, check=(lambda v: v in ("sandwich", "bootstrap"), CI))
    """confidence intervals: sandwich (the sandwich variance) or bootstrap"""
    level: float = option(0.95, what=LEVEL, check=(lambda v: 0 < v < 1, LEVEL))
    """confidence level"""
    bootstrap: int = option(200, what=BOOTSTRAP, check=(lambda v: v >= 10, BOOTSTRAP))
    """resamples when ci is bootstrap"""


@dataclass
class TournamentConfig:
    """A tournament: who plays, what, in which format."""

    name: str = option(what=NAME, check=(lambda v: bool(v.strip()), NAME))
    """shown in reports; the results go to runs/<name>/ unless --db says otherwise"""
    format: str
    """round_robin, swiss, single_elimination, double_elimination, anchor or adaptive
    (a key of tournaments.formats.FORMATS)"""
    players: dict[str, str | dict]
    """player name -> agent spec (`agents.make_agent`), {by_game: {GAME: SPEC, ..., default: SPEC}},
    or {checkpoints: RUN_DIR, ...}: every checkpoint a training run kept, one player each"""
    games: list[TournamentGame]
    """each pairing (or table) plays every game in this list (`TournamentGame`: name, params,
    opening, teams; both seat orders of a pairing share an opening: give deterministic players
    one, or every repeat replays the same game); all have the same number of seats"""
    games_per_pairing: int = option(1, what=POSITIVE, check=(lambda v: v >= 1, POSITIVE))
    """k per game and pairing (best-of-k series in the elimination formats); seats alternate.
    A table of N players: its games per game of the config, seats rotating (default N)"""
    seed: int = option(0, what="an integer")
    """match seeds and random seeding derive from it"""
    format_options: dict = field(default_factory=dict)
    """options of the format: its keyword arguments (`tournaments.formats.format_options`)"""
    rating: RatingOptions = field(default_factory=RatingOptions)
    """leaderboard ratings"""
    arena: dict = field(default_factory=dict)
    """match runner options: concurrency (matches live at once), max_turns (decisions before a
    match is stopped)"""
    sides: bool = option(
        False, what="true or false", check=(lambda v: type(v) is bool, "true or false")
    )
    """a game of two declared teams played one player a side (every seat of its team); the
    tournament is then pairwise"""

    def to_json(self) -> str:
        """Canonical JSON (stored with the tournament; a resume must match it)."""
        d = asdict(self)
        d["games"] = [  # a game without an opening or teams is stored as before they existed
            {k: g[k] for k in GAME_KEYS if k not in OPTIONAL_GAME_KEYS or g[k]} for g in d["games"]
        ]
        if not d["sides"]:  # stored only when set: older stores resume unchanged
            del d["sides"]
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TournamentConfig:
        return load_config(json.loads(text), check_games=False)

    def resume_key(self) -> dict:
        """What a resumed tournament must share with the stored one: the canonical config
        minus what decides only how matches are rated (`rating`) or scheduled on the
        machine (`arena.concurrency`), with the defaults of the format's and the arena's
        options filled in (an option written out at its default is no change)."""
        d = json.loads(self.to_json())
        del d["rating"]
        d["arena"] = {k: v for k, v in arena_options(self.arena).items() if k != "concurrency"}
        opts = resolved_options(self.format, list(self.players), self.format_kwargs(), self.seats())
        d["format_options"] = {
            k: v for k, v in opts.items() if k not in ("games", "best_of")
        }  # = games_per_pairing
        return d

    def format_kwargs(self) -> dict:
        """Options for `make_format`: format_options plus games_per_pairing and seed."""
        opts = dict(self.format_options)
        known = format_options(self.format, self.seats())
        key = "best_of" if "best_of" in known else "games"
        opts[key] = self.games_per_pairing
        if "seed" in known:
            opts.setdefault("seed", self.seed)
        return opts

    def seats(self) -> int:
        """The seats of the tournament's games (the same for all); 2 when played by `sides`."""
        if self.sides:
            return 2
        return game_seats(self.games[0].name, json.dumps(self.games[0].params, sort_keys=True))

    def make_format(self):
        """The format's generator over the players (`tournaments.formats.make_format`)."""
        return make_format(self.format, list(self.players), self.seats(), **self.format_kwargs())


@functools.lru_cache(maxsize=256)
def game_seats(name: str, params_json: str) -> int:
    """How many seats game `name` with these parameters (JSON) has."""
    return len(games.make(name, **json.loads(params_json)).possible_agents)


TOP_KEYS = {f for f in TournamentConfig.__dataclass_fields__}
DRAFT = {"format": "", "players": {}, "games": []}  # the base the builder fills in


def load_config(source: str | Path | Mapping, check_games: bool = True) -> TournamentConfig:
    """A `TournamentConfig` from a YAML file path or an already-parsed mapping.

    `check_games`: look the game names up in the `games` registry (did-you-mean errors).
    """
    where = ""
    if isinstance(source, (str, Path)):
        path = Path(source)
        where = f"{path}: "
        if not path.is_file():
            raise ValueError(f"tournament config {path} not found")
        try:
            source = yaml.safe_load(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{where}not a YAML text file (byte {e.start} is not UTF-8 text)"
            ) from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark else ""
            raise ValueError(f"{where}invalid YAML{at}: {getattr(e, 'problem', e)}") from None
    try:
        return _parse(source, check_games)
    except ValueError as e:
        raise ValueError(f"{where}{e}") from None


def _parse(d: Any, check_games: bool) -> TournamentConfig:
    """A checked `TournamentConfig` from a parsed mapping (one-line errors naming the key)."""
    if not isinstance(d, Mapping):
        raise ValueError(f"a tournament config must be a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - TOP_KEYS)
    if unknown:
        raise ValueError(
            f"unknown key {', '.join(map(repr, unknown))} (known: {', '.join(sorted(TOP_KEYS))})"
        )
    for key in REQUIRED:
        if key not in d:
            raise ValueError(f"missing key {key!r}")
    config = build(TournamentConfig, {"name": d["name"]}, base=TournamentConfig("", **DRAFT))
    fmt = d["format"]
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    specs = _players(d["players"])
    entries = _games(d["games"])
    if check_games:
        _check_games(entries)
    sides = d.get("sides", False)
    if sides:
        seats = _check_sides(sides, entries, specs)
    else:
        seats = _check_seats(entries, fmt, len(specs))
    _check_by_game(specs, [g.name for g in entries])
    scalars = {k: d[k] for k in ("games_per_pairing", "seed", "sides") if k in d}
    if seats > 2:
        scalars.setdefault("games_per_pairing", seats)  # every player in every seat once
    config = build(
        TournamentConfig, scalars, base=replace(config, format=fmt, players=specs, games=entries)
    )
    opts = _format_options(d.get("format_options") or {}, fmt, specs, seats)
    rating = _rating(d.get("rating") or {}, specs)
    arena = d.get("arena") or {}
    if not isinstance(arena, Mapping):
        raise ValueError(f"arena must be a mapping, got {type(arena).__name__}")
    arena_options(arena)
    config = replace(config, format_options=opts, rating=rating, arena=dict(arena))
    _check_round_size(config)
    return config


def _players(players: Any) -> dict[str, str | dict]:
    """Player name -> checked agent spec; a `checkpoints` entry becomes one player per checkpoint."""
    if not isinstance(players, Mapping) or len(players) < 2:
        raise ValueError(
            "players must map at least two player names to agent specs, e.g. {random: random, mcts: mcts:50}"
        )
    specs = {}
    for pname, spec in players.items():
        if not isinstance(pname, str) or not NAME_OK.match(pname):
            raise ValueError(
                f"player name {pname!r} must be a non-empty string without '|' or surrounding spaces"
            )
        expanded = (
            _checkpoint_players(pname, spec)
            if isinstance(spec, Mapping) and "checkpoints" in spec
            else {pname: _check_spec(pname, spec)}
        )
        for player, agent_spec in expanded.items():
            if player in specs:
                raise ValueError(
                    f"two players named {player!r}"
                    + (f" (from {pname}'s checkpoints)" if player != pname else "")
                )
            specs[player] = agent_spec
    return specs


def _games(games_in: Any) -> list[TournamentGame]:
    """The `games:` list (a name, a mapping, or a list of them) as `TournamentGame`s."""
    if isinstance(games_in, (str, Mapping)):
        games_in = [games_in]
    if not isinstance(games_in, list) or not games_in:
        raise ValueError("games must be a non-empty list of game names or {name, params} mappings")
    entries = []
    for i, g in enumerate(games_in):
        if isinstance(g, str):
            g = {"name": g}
        if not isinstance(g, Mapping) or not isinstance(g.get("name"), str):
            raise ValueError(
                f"games[{i}] must be a game name or a mapping with a 'name', got {g!r}"
            )
        extra = sorted(set(g) - set(GAME_KEYS))
        if extra:
            raise ValueError(
                f"games[{i}] has unknown key {', '.join(map(repr, extra))} (known: {', '.join(GAME_KEYS)})"
            )
        params = g.get("params") or {}
        if not isinstance(params, Mapping):
            raise ValueError(f"games[{i}].params must be a mapping, got {type(params).__name__}")
        g = {**g, "params": dict(params)}
        entries.append(build(TournamentGame, g, f"games[{i}]", base=TournamentGame("")))
    return entries


def _check_by_game(specs: dict, game_names: list[str]) -> None:
    """A `by_game` player names only games of the tournament and has an agent for each."""
    for pname, spec in specs.items():
        if not (isinstance(spec, Mapping) and "by_game" in spec):
            continue
        stray = [g for g in spec["by_game"] if g != "default" and g not in game_names]
        if stray:
            hint = did_you_mean(stray[0], game_names) or (
                f" (the games: {', '.join(game_names)}, or 'default')"
            )
            raise ValueError(
                f"player {pname!r}: by_game names {stray[0]!r}, which this tournament does not play{hint}"
            )
        missing = [
            g for g in game_names if g not in spec["by_game"] and "default" not in spec["by_game"]
        ]
        if missing:
            raise ValueError(
                f"player {pname!r}: by_game has no agent for {', '.join(missing)} (add it, or a 'default')"
            )


FORMAT_OPTION_TYPES = (
    ("seed", int),
    ("seed_games", int),
    ("rounds", int),
    ("grand_final_reset", bool),
    ("seeding", str),
    ("tiebreak", str),
    ("tables", int),
)


def _format_options(opts: Any, fmt: str, specs: dict, seats: int = 2) -> dict:
    """The format's options, checked against its signature and the players; `ratings` naming
    an earlier tournament's DB becomes its players' ratings."""
    if not isinstance(opts, Mapping):
        raise ValueError(f"format_options must be a mapping, got {type(opts).__name__}")
    known = [o for o in format_options(fmt, seats) if o not in ("games", "best_of")]
    bad = [o for o in opts if o not in known]
    if bad:
        hint = " (set games_per_pairing instead)" if set(bad) & {"games", "best_of"} else ""
        raise ValueError(
            f"unknown format option {', '.join(map(repr, bad))} for {fmt}{hint} (known: {', '.join(known)})"
        )
    opts = dict(opts)
    if "anchor" in opts and opts["anchor"] not in specs:
        raise ValueError(
            f"format_options.anchor {opts['anchor']!r} is not a player (players: {', '.join(specs)})"
        )
    if isinstance(
        opts.get("ratings"), str
    ):  # an earlier tournament's DB: its Elo of the players here
        source = opts["ratings"]
        try:
            opts["ratings"] = {p: elo for p, elo in stored_ratings(source).items() if p in specs}
        except ValueError as e:
            raise ValueError(f"format_options.ratings: {e}") from None
        if not opts["ratings"]:
            raise ValueError(
                f"format_options.ratings: the tournament in {source} rated none of these players"
            )
    if "ratings" in opts and opts.get("seeding") != "ratings":
        raise ValueError(
            "format_options.ratings is used only with seeding: ratings (add it, or drop the ratings)"
        )
    for key, kind in FORMAT_OPTION_TYPES:
        if key in opts and (
            not isinstance(opts[key], kind) or (kind is int and isinstance(opts[key], bool))
        ):
            raise ValueError(
                f"format_options.{key} must be {'an integer' if kind is int else 'true or false' if kind is bool else 'a string'}, got {opts[key]!r}"
            )
    if "ratings" in opts:
        r = opts["ratings"]
        if not isinstance(r, Mapping) or not all(isinstance(v, (int, float)) for v in r.values()):
            raise ValueError(
                "format_options.ratings must map player names to numbers, or name an earlier tournament's .db"
            )
        unknown_p = [p for p in r if p not in specs]
        if unknown_p:
            raise ValueError(
                f"format_options.ratings names unknown players: {', '.join(map(repr, unknown_p))}"
            )
        opts["ratings"] = dict(r)
    return opts


def _rating(rating_in: Any, specs: dict) -> RatingOptions:
    """The `rating:` mapping as `RatingOptions`; its reference must be a player."""
    if not isinstance(rating_in, Mapping):
        raise ValueError(f"rating must be a mapping, got {type(rating_in).__name__}")
    known = list(RatingOptions.__dataclass_fields__)
    bad = sorted(set(rating_in) - set(known))
    if bad:
        raise ValueError(
            f"unknown rating option {', '.join(map(repr, bad))} (known: {', '.join(known)})"
        )
    reference = rating_in.get("reference")
    if reference is not None and (not isinstance(reference, str) or reference not in specs):
        raise ValueError(
            f"rating.reference {reference!r} is not a player (players: {', '.join(specs)})"
        )
    return build(RatingOptions, rating_in, "rating")


def arena_options(options: Mapping) -> dict:
    """The config's `arena:` mapping with defaults; unknown keys and bad values are an error."""
    bad = sorted(set(options) - set(ARENA_OPTIONS))
    if bad:
        raise ValueError(
            f"unknown arena option {', '.join(map(repr, bad))} (known: {', '.join(ARENA_OPTIONS)})"
        )
    out = {**ARENA_OPTIONS, **options}
    for k, v in out.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"arena.{k} must be a positive integer, got {v!r}")
    return out


def _check_round_size(config: TournamentConfig) -> None:
    """At most MAX_ROUND_MATCHES matches in any round: the format's first round (a round
    robin's only one, a seeding phase), and half the players paired with
    games_per_pairing games each (every later round of the other formats)."""
    players = list(config.players)
    first = next(config.make_format())
    later = len(players) // config.seats() * config.games_per_pairing
    largest = max(sum(p.games for p in first), later) * len(config.games)
    if largest > MAX_ROUND_MATCHES:
        raise ValueError(
            f"this tournament asks for up to {largest:,} matches in one round (games_per_pairing {config.games_per_pairing}, "
            f"{len(players)} players, {len(config.games)} game(s)); the limit is {MAX_ROUND_MATCHES:,} matches a round "
            f"(lower games_per_pairing, or format_options.seed_games, or format_options.tables)"
        )


def _check_spec(pname: str, spec: Any) -> str | dict:
    """The shape of an agent spec (the arena checks the rest when it builds the agent)."""
    if isinstance(spec, str) and spec.strip():
        return spec.strip()
    if isinstance(spec, Mapping) and "by_game" in spec:
        extra = sorted(set(spec) - {"by_game"})
        per = spec["by_game"]
        if extra or not isinstance(per, Mapping) or not per:
            raise ValueError(
                f"player {pname!r}: by_game must be the only key and map game names to agent specs"
            )
        return {"by_game": {g: _check_spec(f"{pname}.by_game.{g}", s) for g, s in per.items()}}
    if isinstance(spec, Mapping):
        if not isinstance(spec.get("type"), str):
            raise ValueError(
                f"player {pname!r}: agent spec {dict(spec)} needs a 'type' (random, mcts, cfr, llm, tit_for_tat, ...)"
            )
        return dict(spec)
    raise ValueError(
        f"player {pname!r}: agent spec must be a name like 'mcts:50' or a mapping with a 'type', got {spec!r}"
    )


def _checkpoint_players(pname: str, spec: Mapping) -> dict[str, dict]:
    """`{checkpoints: RUN_DIR, **llm options}` -> one LLM player per checkpoint the run kept:
    NAME@STEP for each RUN_DIR/checkpoints/step_N, and NAME@best for RUN_DIR/best.
    """
    if "type" in spec or "model" in spec:
        raise ValueError(
            f"player {pname!r}: a 'checkpoints' entry names a training run; its players are LLMs of its checkpoints (no 'type' or 'model')"
        )
    if not isinstance(spec["checkpoints"], str) or not spec["checkpoints"].strip():
        raise ValueError(
            f"player {pname!r}: checkpoints must name a training run's folder, got {spec['checkpoints']!r}"
        )
    run = Path(spec["checkpoints"])
    found = sorted(
        (int(d.name[5:]), d)
        for d in (run / "checkpoints").glob("step_*")
        if d.is_dir() and d.name[5:].isdigit()
    )
    players = {f"{pname}@{step}": d for step, d in found}
    if (run / "best" / "model.safetensors").is_file():
        players[f"{pname}@best"] = run / "best"
    if not players:
        raise ValueError(
            f"player {pname!r}: no checkpoints under {run} (expected {run}/checkpoints/step_N or {run}/best)"
        )
    options = {k: v for k, v in spec.items() if k != "checkpoints"}
    return {name: {"type": "llm", "model": str(d), **options} for name, d in players.items()}


def _check_games(specs: list[TournamentGame]) -> None:
    """Every game must exist and take its parameters."""
    for g in specs:
        if not g.name.startswith("openspiel:"):
            games.info(g.name)  # ValueError with did-you-mean for unknown names
        try:  # bad parameters fail here, before any store exists
            game_seats(g.name, json.dumps(g.params, sort_keys=True))
        except ValueError as e:
            raise ValueError(f"game {g.name!r} with params {g.params}: {e}") from None


def _check_seats(entries: list[TournamentGame], fmt: str, players: int) -> int:
    """The games' common seat count, checked against the format, the players and each
    game's teams; returns it."""
    seats = {g.name: game_seats(g.name, json.dumps(g.params, sort_keys=True)) for g in entries}
    if len(set(seats.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in seats.items())
        raise ValueError(
            f"games must all have the same number of seats ({listed}): a table seats the same players for each"
        )
    n = next(iter(seats.values()))
    if n > MAX_SEATS:
        raise ValueError(
            f"game {entries[0].name!r} has {n} seats; a tournament table seats at most {MAX_SEATS}"
        )
    format_options(fmt, n)  # a pairwise format with more than two seats: the one-line error
    if n > players:
        raise ValueError(
            f"game {entries[0].name!r} has {n} seats; the tournament needs at least {n} players, it has {players}"
        )
    for i, g in enumerate(entries):
        _check_teams(g.teams, n, f"games[{i}].teams")
    return n


def _check_sides(sides: Any, entries: list[TournamentGame], specs: dict) -> int:
    """`sides: true`: every game declares two teams (and no `teams:` key), no player's name has
    a '#' (a player's other seats are named `name#2`, ...); returns 2, the seats of a pairing."""
    if sides is not True:
        raise ValueError(f"sides must be true or false, got {sides!r}")
    for i, g in enumerate(entries):
        declared = games.declared_teams(g.name, g.params, 0)
        if g.teams or len(declared) != 2:
            has = f"declares {len(declared)} teams" if not g.teams else "has a teams: key"
            raise ValueError(
                f"sides: true needs games that declare two teams (codewords, werewolf); games[{i}] "
                f"{g.name} {has}"
            )
    named = [p for p in specs if "#" in p]
    if named:
        raise ValueError(
            f"sides: true names a player's other seats name#2, ...; rename {', '.join(map(repr, named))} (no '#')"
        )
    return 2


def _check_teams(teams: list, seats: int, where: str) -> None:
    """`teams` is empty or splits the seats 0..seats-1 into at least two groups."""
    if not teams:
        return
    flat = [s for t in teams if isinstance(t, list) for s in t]
    if (
        len(teams) < 2
        or not all(isinstance(t, list) and t for t in teams)
        or sorted(flat) != list(range(seats))
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in flat)
    ):
        raise ValueError(
            f"{where} must split the seats 0..{seats - 1} into at least two groups, each seat in one, got {teams!r}"
        )


def rated_games(
    schedule: list[MatchSpec], results: dict[str, MatchResult]
) -> list[tuple[str, str, float]]:
    """(seat-0 player, seat-1 player, points of seat 0) of each scheduled match that has a result."""
    return [
        (s.seats[0], s.seats[1], results[s.match_id].points(s.seats[0]))
        for s in schedule
        if s.match_id in results
    ]


def finishes(
    config: TournamentConfig, schedule: list[MatchSpec], results: dict[str, MatchResult]
) -> list[Finish]:
    """Each scheduled match that has a result as a finishing order (seats, returns, the game's
    teams, labelled with the game's name); a match the arena aborted is a tie of all its sides,
    as its outcome is a draw."""
    teams = {g.name: tuple(tuple(t) for t in g.teams) for g in config.games}
    out = []
    for s in schedule:
        r = results.get(s.match_id)
        if r is not None:
            scores = tuple(0.0 if r.error else r.scores[p] for p in s.seats)
            sides = teams.get(s.game) or games.declared_teams(s.game, s.params, s.seed)
            out.append(Finish(tuple(s.seats), scores, sides, s.game))
    return out


def pairwise(config: TournamentConfig) -> bool:
    """Are the tournament's games two players, one a side (Bradley-Terry's case)?"""
    return config.sides or (config.seats() == 2 and not any(g.teams for g in config.games))


def stored_config(db_path: str | os.PathLike) -> TournamentConfig:
    """The config of the tournament in `db_path` (which must exist)."""
    if not Path(db_path).is_file():
        raise ValueError(f"no tournament database at {db_path}")
    with Store(db_path, readonly=True) as store:
        text = store.meta("config")
        order = list(store.players())
    if text is None:
        raise ValueError(f"{db_path} is not a tournament database (no config stored)")
    config = TournamentConfig.from_json(text)
    if set(order) == set(
        config.players
    ):  # the canonical JSON sorts the players; the store keeps their order
        config.players = {p: config.players[p] for p in order}
    return config


def stored_ratings(db_path: str | os.PathLike) -> dict[str, float]:
    """Bradley-Terry (Plackett-Luce for N seats or teams) Elo of the players of the tournament
    in `db_path`, from every match stored so far (finished or not), pinned as its config pins
    them, with its leaderboard's per-game seat terms: prior ratings to seed another tournament with.
    """
    config = stored_config(db_path)
    with Store(db_path, readonly=True) as store:
        schedule, results = store.schedule(), store.results()
    if not results:
        raise ValueError(f"{db_path} has no finished match to rate its players by")
    players, reference = list(config.players), config.rating.reference
    if not pairwise(config):
        fit = fit_plackett_luce(
            finishes(config, schedule, results), players, reference, ci=None, seat=True
        )
        return {p: r.elo for p, r in fit.ratings.items()}
    games = rated_games(schedule, results)
    seat_games = [s.game for s in schedule if s.match_id in results]
    ratings = bradley_terry(games, players, reference, ci=None, seat=seat_games)
    return {p: r.elo for p, r in ratings.items()}
