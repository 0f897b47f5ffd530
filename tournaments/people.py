"""Games people play against a tournament's players, rated with them.

`arena web`'s Play page can play a game *into* a tournament: the opponents are the
tournament's players (their stored agent specs), the game one of its games with its params,
and the finished match is appended (fsynced) to the file beside the tournament's store,
`people_jsonl(db)` ("tournament.db" -> "tournament.people.jsonl"). The store itself is never
written, so a tournament still running in another process is not disturbed, and a killed
server loses no finished game.

`with_people(result, db)` adds those games to a tournament as it stands: each person (a seat
name that is not one of the tournament's players; "human" unless the form names them) becomes a
player, the ratings are refitted over the tournament's matches and theirs together (the
tournament's own model: Bradley-Terry with first-mover terms, or Plackett-Luce for tables and
teams), and people are ranked after the format's own order, which their games do not enter.
A record that is not such a game (another game, one person in several seats, two people, a
player the tournament does not have) is left out.

`seat_in(db, game, person, opponents)` checks a request to play into a tournament and gives what
the game needs: the game's params as the tournament plays it, the players' specs, and the file
to append to. `arena web`'s Play page and `arena env-serve --tournament` (a client, e.g. another
trainer's policy, playing the tournament's players) both go through it, and `arena tournament`
reports the tournament with the people's games rated in.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from core.records import MatchRecord, read_jsonl
from tournaments.config import stored_config
from tournaments.run import TournamentResult, rate
from tournaments.store import MatchResult, MatchSpec

SUFFIX = ".people.jsonl"
LABEL = "people"  # the round label of a person's game
PERSON = "human"  # the agent spec a person stands for in the extended config
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")  # a person's name on a leaderboard


@dataclass(frozen=True)
class PeopleSeat:
    """What a game played into a tournament needs (`seat_in`)."""

    params: dict  # the game's params as the tournament plays it
    players: dict  # the tournament's players: name -> agent spec
    record: Path  # the people file the finished game is appended to


def seat_in(db: str | os.PathLike, game: str, person: str, opponents: list[str]) -> PeopleSeat:
    """Check that `person` may play `game` into the tournament of `db` against the players
    `opponents` (one-line ValueErrors: a game it does not play, a name that is not a person's
    or is a player's, an opponent that is not a player)."""
    config = stored_config(db)
    entry = next((g for g in config.games if g.name == game), None)
    if entry is None:
        names = ", ".join(g.name for g in config.games)
        raise ValueError(f"tournament {config.name!r} plays {names}, not {game!r}")
    if not NAME.match(person) or person in config.players:
        raise ValueError(
            f"your name must be letters, digits, '_', '-' or '.' and not a player's, got {person!r}"
        )
    unknown = [n for n in opponents if n not in config.players]
    if unknown or not opponents:
        raise ValueError(
            f"opponents must be players of {config.name!r} ({', '.join(config.players)}), "
            f"got {', '.join(unknown) or 'none'}"
        )
    return PeopleSeat(dict(entry.params), dict(config.players), people_jsonl(db))


def people_jsonl(db: str | os.PathLike) -> Path:
    """The file of people's games beside a tournament store: "t.db" -> "t.people.jsonl"."""
    return Path(db).with_suffix(SUFFIX)


def person_of(record: MatchRecord, players: dict) -> str | None:
    """The one seat name of `record` that is not a tournament player, or None when the record
    has none, several, or a name twice."""
    names = list(record.seats.values())
    others = [n for n in names if n not in players]
    return others[0] if len(others) == 1 and len(set(names)) == len(names) else None


def people_games(result: TournamentResult, db: str | os.PathLike) -> list[MatchRecord]:
    """The games people played into the tournament of `db` that fit it (see the module doc)."""
    path = people_jsonl(db)
    if not path.is_file():
        return []
    known = {(g.name, json.dumps(g.params, sort_keys=True)) for g in result.config.games}
    return [
        r
        for r in read_jsonl(path)
        if (r.game, json.dumps(r.params, sort_keys=True)) in known
        and person_of(r, result.config.players) is not None
    ]


def with_people(result: TournamentResult, db: str | os.PathLike) -> TournamentResult:
    """`result` with the people's games of `db` rated in (the same object when there are none)."""
    records = people_games(result, db)
    if not records:
        return result
    cfg = result.config
    specs = [
        MatchSpec(r.match_id, r.game, dict(r.params), r.seed, list(r.seats.values()), -1, LABEL)
        for r in records
    ]
    results = {r.match_id: MatchResult.from_record(r, people_jsonl(db)) for r in records}
    people = list(dict.fromkeys(person_of(r, cfg.players) for r in records))
    config = replace(cfg, players={**cfg.players, **{p: PERSON for p in people}})
    stats = {}
    for p in people:
        mine = [results[s.match_id] for s in specs if p in s.seats]
        stats[p] = {"games": len(mine), "points": sum(r.points(p) for r in mine)}
    outcome = replace(
        result.outcome,
        order=[*result.outcome.order, *people],
        stats={**result.outcome.stats, **stats},
    )
    out = replace(
        result,
        config=config,
        outcome=outcome,
        schedule=[*result.schedule, *specs],
        results={**result.results, **results},
    )
    rate(config, out)
    return out
