"""What an evaluation plays: suites of (game, opponents), the config, and the match plans.

Suites follow the catalogue's `split` (`arena games`) and MARS's protocol at our scale:

    train      tic_tac_toe vs random, mcts:100, mcts:1000; kuhn_poker vs random, cfr
    held_out   connect_four vs random, mcts:100, mcts:1000; leduc_poker vs random, cfr
    all        both

A split's games without default opponents (the cooperative Hanabi games) are left out of
its suite. Any game can be named instead (`--games`, or `games:` in a config), with its
`DEFAULT_OPPONENTS` or the ones given.

Pairing: match k of (game, opponent) has the same seed for every evaluated agent (the
deal, the opening, the opponent's random stream: see `evaluation.run.OwnStream`), and
the agent takes seat k mod n; the n matches of a group (k // n) share their seed, so the
agent plays every side of each deal. Two agents' results are therefore paired match by
match (`evaluation.metrics.paired`).

Seats: an opponent entry fills every seat but the agent's, in a game of any number of seats
(`public_goods` with `num_players` up to 10, `openspiel:kuhn_poker` with `players=3`): its
seats are named `label`, `label#2`, ... and share one agent, each seat on its own random
stream. In a game of teams (codewords' two pairs, werewolf's wolves and village, dealt each
match) the agent plays a whole team (`agent`, `agent#2`, ...) against the opponent's, each team
of every deal in turn. A game of more than two seats, or a social dilemma, is scored by rank
(`evaluation.metrics.win_loss_game`).

A mixed field: the entry `{field: [spec, ...], name: ...}` (or the string
`field:spec,spec,...`) fills the other seats with its members in order, the order turned by
one each deal so every member sits in every seat; a member's seats are named after it
(`tit_for_tat`, `always_defect`, `tit_for_tat#2`, ...) and the rows after the field's name
(default `field(a,b,...)`). A member may be `self`.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

import games
from arena.runner import MatchPlan
from core.typed_config import build, check_fields, option
from games.entry import GameEntry

GAME_KEYS = ("name", "opponents", "params", "opening", "blank_messages")  # an entry's keys
BLANKED = "/blanked"  # the game key's suffix of a match played with the messages blanked
POSITIVE = "a positive integer"
POSITIVE_INT = (lambda v: type(v) is int and v >= 1, POSITIVE)
SUITES = {"train": "train", "held_out": "held_out"}  # suite name -> catalogue split
FIELD = "field"  # opponent entry {field: [spec, ...]}: a mixed field, one member per other seat
SELF = "self"  # opponent spec: the evaluated agent itself in the other seats (cooperative games, self-play)
MCTS = ["random", "mcts:100", "mcts:1000"]
DILEMMA = ["tit_for_tat", "always_defect", "always_cooperate"]
DEFAULT_OPPONENTS: dict[str, list] = {
    "tic_tac_toe": MCTS,
    "connect_four": MCTS,
    "kuhn_poker": ["random", "cfr"],
    "leduc_poker": ["random", "cfr"],
    "liars_dice": ["random"],
    "goofspiel": ["random"],
    "prisoners_dilemma": DILEMMA,
    "stag_hunt": DILEMMA,
    "chicken": DILEMMA,
    "public_goods": DILEMMA,
    "trust_and_split": ["tit_for_tat", "always_defect"],
    "negotiation": ["random"],
    "simple_negotiation": ["random"],
    "werewolf": ["werewolf_heuristic"],
    "codewords": ["codewords_tags"],
}


@dataclass
class EvalGame(GameEntry):
    """One game of a suite and the opponents the agent meets in it."""

    opponents: list = option(factory=list)
    """agent specs (strings or mappings); empty: the game's DEFAULT_OPPONENTS"""
    blank_messages: bool = False
    """a game with messages (trust_and_split): also play every match again, the same seeds, with
    every message blanked (the game's `blank_messages`; rows of the game `NAME/blanked`), so the
    report says what the messages carry (`evaluation.messages`)"""


@dataclass
class EvalConfig:
    """An evaluation (`arena eval`; YAML: these keys)."""

    agent: Any = None
    """the evaluated agent's spec (agents.make_agent)"""
    baseline: Any = None
    """optional second agent; it plays the very same matches, and the report pairs the two"""
    games: list = field(default_factory=list)
    """EvalGames (YAML: names or {name, opponents, params, opening}); empty: the suite's"""
    suite: str = option(
        "held_out", check=(lambda v: v in (*SUITES, "all"), "train, held_out or all")
    )
    """train | held_out | all, when `games` is empty"""
    matches: int = option(100, what=POSITIVE, check=POSITIVE_INT)
    """matches per (game, opponent) and evaluated agent, rounded up to a multiple of the seats"""
    seed: int = 0
    """match seeds (the deals and openings) derive from it"""
    exploitability: bool = False
    """also compute the exact exploitability of the agent's policy on every game that allows it"""
    perfect_play: bool = False
    """also walk the agent's policy over every position it reaches against any opponent, both seats, on
    every game the solver searches to the end (tic-tac-toe): blunders and the loss rate against a perfect
    adversary (`evaluation.perfect_play`; pass temperature=0 in an LLM agent's spec to walk its greedy play)"""
    samples: int = option(8, what=POSITIVE, check=POSITIVE_INT)
    """exploitability of a free-text agent: replies sampled per information state"""
    max_states: int = option(5000, what=POSITIVE, check=POSITIVE_INT)
    """exploitability: games with more information states are skipped"""
    concurrency: int = option(16, what=POSITIVE, check=POSITIVE_INT)
    """matches played at once (LLM turns batched across them)"""
    max_turns: int = option(2000, what=POSITIVE, check=POSITIVE_INT)
    """a match is stopped (a draw) after this many decisions"""
    out: str = "runs/eval"
    """output folder: eval.db (SQLite store), eval.jsonl (trajectories), eval.json, eval.html"""

    def __post_init__(self):
        if self.agent is None:
            raise ValueError("an evaluation needs an agent (--agent SPEC, or agent: in the config)")
        check_fields(self)
        self.games = [g if isinstance(g, EvalGame) else game_spec(g) for g in self.games] or suite(
            self.suite
        )
        names = [(g.name, json.dumps(g.params, sort_keys=True)) for g in self.games]
        if len(set(names)) != len(names):
            raise ValueError("a game is listed twice with the same params")

    def to_json(self) -> str:
        """Canonical JSON (stored with the evaluation; a resume must match it)."""
        d = asdict(self)
        d["games"] = [  # blank_messages only when set: older stores' keys stay as they were
            {k: v for k, v in g.items() if k in GAME_KEYS and (k != "blank_messages" or v)}
            for g in d["games"]
        ]
        return json.dumps(d, sort_keys=True, default=str)


def suite(name: str) -> list[EvalGame]:
    """The games of a suite with their default opponents."""
    splits = list(SUITES.values()) if name == "all" else [SUITES[name]]
    return [
        EvalGame(g, opponents=list(DEFAULT_OPPONENTS[g]))
        for s in splits
        for g in games.names(s)
        if g in DEFAULT_OPPONENTS
    ]


def game_spec(entry: Any, opponents: list | None = None) -> EvalGame:
    """An EvalGame from a name or a {name, opponents, params, opening} mapping."""
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or "name" not in entry:
        raise ValueError(f"a game entry is a name or a mapping with a name, got {entry!r}")
    unknown = set(entry) - set(GAME_KEYS)
    if unknown:
        raise ValueError(
            f"game {entry['name']!r}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(GAME_KEYS)})"
        )
    name = entry["name"]
    games.info(name)  # unknown game: one line with a did-you-mean
    opps = entry.get("opponents") or opponents or DEFAULT_OPPONENTS.get(name) or ["random"]
    if not isinstance(opps, list):
        opps = [opps]
    try:
        opps = [opponent_entry(o) for o in opps]
    except ValueError as e:
        raise ValueError(f"game {name!r}: {e}") from None
    game = EvalGame(name, params=dict(entry.get("params") or {}), opponents=opps)
    blank = entry.get("blank_messages", False)
    if blank is not False and (blank is not True or not _has_blank_messages(name)):
        raise ValueError(
            f"game {name!r}: blank_messages is true or false, for a game with messages"
        )
    try:  # the opening's rule is GameEntry's
        opts = {"opening": entry.get("opening", 0), "blank_messages": blank}
        return build(EvalGame, opts, base=game)
    except ValueError as e:
        raise ValueError(f"game {name!r}: {e}") from None


def _has_blank_messages(name: str) -> bool:
    """Does game `name` take the `blank_messages` parameter (a game with messages)?"""
    if name.startswith("openspiel:"):  # OpenSpiel's games have no messages
        return False
    try:
        games.make(name, blank_messages=True)
    except games.UnknownParameter:
        return False
    return True


def with_blank_messages(config: EvalConfig) -> EvalConfig:
    """`config` with `blank_messages` on every game that has messages (`arena eval
    --blank-messages`); a ValueError when none has."""
    games_ = [replace(g, blank_messages=_has_blank_messages(g.name)) for g in config.games]
    if not any(g.blank_messages for g in games_):
        names = ", ".join(g.name for g in config.games) or "the suite's"
        raise ValueError(f"--blank-messages: none of the games ({names}) has messages")
    return replace(config, games=games_)


def load_config(path: str | Path, overrides: dict | None = None) -> EvalConfig:
    """An EvalConfig from YAML; `overrides` (command-line values that are not None) win."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no evaluation config at {p}")
    d = yaml.safe_load(p.read_text()) or {}
    if not isinstance(d, dict):
        raise ValueError(
            f"{p}: an evaluation config is a mapping of keys (agent, games, matches, ...)"
        )
    return make_config(
        {**d, **{k: v for k, v in (overrides or {}).items() if v is not None}}, where=str(p)
    )


def make_config(d: dict, where: str = "evaluation") -> EvalConfig:
    """An EvalConfig from a mapping: its keys checked by the rules next to the fields."""
    unknown = set(d) - set(EvalConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(EvalConfig.__dataclass_fields__)})"
        )
    return build(EvalConfig, d)


def opponent_entry(spec: Any) -> Any:
    """An opponent entry as plans read it: `field:a,b` -> {field: [a, b]}; a field checked."""
    if isinstance(spec, str) and spec.startswith(f"{FIELD}:"):
        spec = {FIELD: [m.strip() for m in spec[len(FIELD) + 1 :].split(",")]}
    if isinstance(spec, dict) and FIELD in spec:
        members, extra = spec[FIELD], set(spec) - {FIELD, "name"}
        if extra:
            raise ValueError(
                f"a field takes the keys field and name, not {', '.join(sorted(extra))}"
            )
        if not isinstance(members, list) or not members or not all(members):
            raise ValueError(f"a field is a non-empty list of agent specs, got {members!r}")
        if any(isinstance(m, dict) and FIELD in m for m in members):
            raise ValueError("a field's members are agent specs, not fields")
    return spec


def field_members(spec: Any) -> list:
    """The agent specs that fill the other seats: a field's members, or the one spec."""
    return list(spec[FIELD]) if isinstance(spec, dict) and FIELD in spec else [spec]


def opponent_label(spec: Any) -> str:
    """The name an opponent (or a field of them) is known by in records and tables."""
    if isinstance(spec, str):
        return spec
    if spec.get("name"):
        return str(spec["name"])
    if FIELD in spec:
        return f"{FIELD}({','.join(opponent_label(m) for m in spec[FIELD])})"
    return json.dumps(spec, sort_keys=True)


def num_seats(g: EvalGame) -> int:
    """The game's seats with its params (public_goods' `num_players`, an OpenSpiel game's own)."""
    if g.params or g.name.startswith("openspiel:"):
        return len(games.make(g.name, **g.params).possible_agents)
    return games.info(g.name).num_players


def rounded_matches(n: int, seats: int) -> int:
    return -(-n // seats) * seats


def match_seed(seed: int, key: str) -> int:
    return zlib.crc32(f"{seed}|{key}".encode()) & 0x7FFFFFFF


def plans(who: str, games_: list[EvalGame], matches: int, seed: int) -> list[MatchPlan]:
    """The matches agent `who` plays: per game and opponent, `matches` (rounded up to a
    multiple of the seats), the agent in seat k mod n, opponents in the other seats
    (named `label`, `label#2`, ... so that every seat has its own name). In a game that
    declares teams (`games.declared_teams`: codewords, werewolf) the agent plays every seat of
    one team (`who`, `who#2`, ...) and the opponent every other seat: match k the k mod T-th
    of the T teams of its deal, rounded up to a multiple of T. A field's members take the
    other seats in order, turned by one each deal."""
    out = []
    for gi, g in enumerate(games_):
        n, teams = num_seats(g), num_teams(g)
        per = teams or n  # the matches of one deal: the agent in each seat, or each team
        for oi, spec in enumerate(g.opponents):
            label = opponent_label(spec)
            members = [opponent_label(m) for m in field_members(spec)]
            for name in {label, *members}:
                if "|" in name or name in (who, "agent", "baseline"):
                    raise ValueError(
                        f"opponent name {name!r} is reserved or has a '|' (give the spec a name:)"
                    )
            for k in range(rounded_matches(matches, per)):
                d = k // per  # the deal
                s = match_seed(seed, f"{gi:02d}.{g.name}|{d}")
                mine = games.declared_teams(g.name, g.params, s)[k % per] if teams else (k % n,)
                others = [members[(j + d) % len(members)] for j in range(n - len(mine))]
                seats = seat_names(who, others, n, mine)
                for key, params in variants(g):
                    mid = f"{who}|{gi:02d}.{key}|{oi:02d}.{label}|{k:05d}"
                    out.append(MatchPlan(mid, g.name, seats, s, params, g.opening))
    return out


def variants(g: EvalGame) -> list[tuple[str, dict]]:
    """The game keys and params a game entry's matches are played with: as given, and with
    `blank_messages` a second time with the messages blanked."""
    out = [(g.name, dict(g.params))]
    if g.blank_messages:
        out.append((g.name + BLANKED, {**g.params, "blank_messages": True}))
    return out


def seat_names(who: str, others: list[str], n: int, mine: tuple[int, ...]) -> list[str]:
    """The agents of a match's n seats: `who` in the seats `mine` (`who`, `who#2`, ...), the
    opponents `others` in the other seats in order, a name's second seat `name#2` and so on."""
    agent = iter([who] + [f"{who}#{j}" for j in range(2, n)])
    rest, seen = iter(others), Counter()
    out = []
    for s in range(n):
        if s in mine:
            out.append(next(agent))
            continue
        label = next(rest)
        seen[label] += 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def num_teams(g: EvalGame) -> int:
    """The teams a game declares with its params (0: none, every seat plays for itself)."""
    return len(games.declared_teams(g.name, g.params, 0))


def plan_key(match_id: str) -> tuple[str, str, int]:
    """(game key, opponent key, match number) of a plan's match id: equal for paired matches.
    The keys are "<index>.<name>": suite order sorts first, `unkey` gives the name."""
    _, game, opponent, k = match_id.split("|")
    return game, opponent, int(k)


def unkey(key: str) -> str:
    """ "00.tic_tac_toe" -> "tic_tac_toe"."""
    return key.split(".", 1)[1]
