"""Run a tournament: format rounds -> matches -> store, resumable after any crash.

    result = run_tournament(config, play_matches, "runs/t.db")

`play_matches(specs: list[MatchSpec]) -> Iterable[MatchResult]` plays a batch (a whole
round, concurrently if it likes). Contract: it appends each finished match's MatchRecord
to the JSONL beside the DB (`jsonl_beside(db)`, via `core.records.append_jsonl`) and
only then yields its `MatchResult` (`MatchResult.from_record(record, jsonl)`), in any
order, as matches finish. Each yielded result is stored at once, in its own transaction.

Expansion: a pairing (a, b) of the format plays, for each of its games g and each game j
of the config, one match with seats [a, b] when g + j is even and [b, a] otherwise (seats
alternate across repeats and across games). With a random opening (`games[j].opening`)
games 2m and 2m+1 of a pairing (the two seat orders) share their seed, hence the opening
and the deal: each player plays both sides of it. A game g of the format counts the mean points
of its matches, so a multi-game pairing is still one comparison per g.

A table (p_0, ..., p_{N-1}) of a game of N seats (`tournaments.tables`) plays, for each of
its games g and each game j of the config, one match with the players rotated by g + j:
seat s holds p_{(s + g + j) mod N}. With an opening, the N rotations g = N m ... N m + N - 1
share their seed: each player plays every seat of the same opening (and deal). Its result
is each match's finishing order (`tournaments.rounds.Finish`); the ratings are then
Plackett-Luce's (`tournaments.plackett_luce`), as they are for a game with teams.

Resume = rerun with the same config and DB: the format is replayed from its seed and the
stored results, matches present in the JSONL but not in the store are recovered from it
(`store.read_log`; a deleted DB is rebuilt from the JSONL so, to the same results, and a
damaged one is moved aside to `<db>.damaged-<time>` and rebuilt the same way:
`store.open_or_rebuild`), and only the missing matches are played. Stored matches that the
trajectory file lacks (it was deleted or replaced while the tournament ran) are listed in
`TournamentResult.missing`. `rating` options and `arena.concurrency` may change
between runs (they decide how matches are rated and how many run at once, not which or
how they end); anything else may not, `arena.max_turns` and the players' order included,
once a match is stored (`TournamentConfig.resume_key`: options written out at their
defaults are no change). Before that (a first run that failed on a bad agent or game) a
changed config starts the tournament over, and the old JSONL is moved aside
(`<name>.jsonl.replaced-<time>`).

`tournament_so_far` reads a store without writing to it, while another process runs the
tournament or after it stopped: the result of a finished one, else its leaderboard so far.
"""

from __future__ import annotations

import itertools
import os
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agents import checkpoint_of
from core.records import check_writable
from tournaments.config import (  # noqa: F401 (stored_*: callers of this module)
    TournamentConfig,
    finishes,
    pairwise,
    rated_games,
    stored_config,
    stored_ratings,
)
from tournaments.plackett_luce import fit_plackett_luce
from tournaments.ratings import fit_bradley_terry
from tournaments.rounds import (
    Finish,
    Outcome,
    Pairing,
    PairResult,
    Table,
    TableResult,
    drive,
    sort_players,
)
from tournaments.store import (
    MatchResult,
    MatchSpec,
    Store,
    jsonl_beside,
    missing_trajectories,
    open_or_rebuild,
    read_log,
)

PlayMatches = Callable[[list[MatchSpec]], Iterable[MatchResult]]

__all__ = [
    "MatchSpec",
    "MatchResult",
    "TournamentResult",
    "run_tournament",
    "tournament_so_far",
    "load_tournament",
    "stored_config",
    "stored_ratings",
    "rated_games",
    "rate",
    "match_specs",
    "match_seed",
    "jsonl_beside",
]


@dataclass
class TournamentResult:
    """A tournament, finished unless read by `tournament_so_far` before its end."""

    config: TournamentConfig
    outcome: Outcome  # the format's ranking, rounds and bracket
    schedule: list[MatchSpec]  # every match played, in order
    results: dict[str, MatchResult]  # match_id -> result
    ratings: dict  # player -> tournaments.ratings.Rating (Bradley-Terry, Elo scale, with CIs)
    db_path: str
    jsonl_path: str
    recovered: int = 0  # matches taken from the JSONL on resume instead of replayed
    played: int = 0  # matches played by this call
    finished: bool = (
        True  # False: the standing so far, players ordered by rating (`tournament_so_far`)
    )
    seat: dict = field(
        default_factory=dict
    )  # game -> tournaments.ratings.SeatAdvantage, fitted with the ratings
    missing: list[str] = field(
        default_factory=list
    )  # stored matches whose trajectory file lacks them (`store.missing_trajectories`)

    def games(self) -> list[tuple[str, str, float]]:
        """One (seat-0 player, seat-1 player, points of seat 0) per match of two players; for
        N seats or teams one per pair of players on different sides of a match (points: 1 for
        finishing above the other, 1/2 level): the head-to-head record behind win rates."""
        if pairwise(self.config):
            return rated_games(self.schedule, self.results)
        out = []
        for f in self.finishes():
            side = {s: k for k, members in enumerate(f.sides()) for s in members}
            results = f.side_results()
            for i, j in itertools.combinations(range(len(f.seats)), 2):
                if side[i] != side[j]:
                    a, b = results[side[i]], results[side[j]]
                    out.append((f.seats[i], f.seats[j], 1.0 if a > b else 0.5 if a == b else 0.0))
        return out

    def finishes(self) -> list[Finish]:
        """Every match with a result as a finishing order, in schedule order."""
        return finishes(self.config, self.schedule, self.results)


def match_seed(tournament_seed: int, match_id: str) -> int:
    """A stable 31-bit env seed per match."""
    return zlib.crc32(f"{tournament_seed}|{match_id}".encode()) & 0x7FFFFFFF


def match_specs(
    config: TournamentConfig, pairing: Pairing | Table, round_no: int
) -> list[MatchSpec]:
    """The matches one pairing or table plays this round (see the module doc for seats)."""
    if isinstance(pairing, Table):
        return table_specs(config, pairing, round_no)
    specs = []
    for g in range(pairing.first_game, pairing.first_game + pairing.games):
        for j, game in enumerate(config.games):
            seats = [pairing.a, pairing.b] if (g + j) % 2 == 0 else [pairing.b, pairing.a]
            base = f"{pairing.label}|{pairing.a}|{pairing.b}|{j}.{game.name}"
            mid = f"{base}|{g}"
            seed_key = f"{base}|pair{g // 2}" if game.opening else mid
            specs.append(
                MatchSpec(
                    mid,
                    game.name,
                    dict(game.params),
                    match_seed(config.seed, seed_key),
                    seats,
                    round_no,
                    pairing.label,
                    game.opening,
                )
            )
    return specs


def table_specs(config: TournamentConfig, table: Table, round_no: int) -> list[MatchSpec]:
    """The matches one table plays this round: seats rotating (see the module doc)."""
    n = len(table.players)
    specs = []
    for g in range(table.first_game, table.first_game + table.games):
        for j, game in enumerate(config.games):
            turn = (g + j) % n
            seats = list(table.players[turn:] + table.players[:turn])
            base = f"{table.label}|{'|'.join(table.players)}|{j}.{game.name}"
            mid = f"{base}|{g}"
            seed_key = f"{base}|rotation{g // n}" if game.opening else mid
            seed = match_seed(config.seed, seed_key)
            specs.append(
                MatchSpec(
                    mid,
                    game.name,
                    dict(game.params),
                    seed,
                    seats,
                    round_no,
                    table.label,
                    game.opening,
                )
            )
    return specs


def pair_result(
    config: TournamentConfig,
    pairing: Pairing | Table,
    results: dict[str, MatchResult],
    round_no: int,
) -> PairResult | TableResult:
    """Sum a pairing's matches into the format's PairResult (mean points over the games);
    a table's are its matches' finishing orders (a TableResult)."""
    if isinstance(pairing, Table):
        specs = match_specs(config, pairing, round_no)
        return TableResult(finishes(config, specs, results))
    total = PairResult(0.0, 0.0, 0.0, 0.0, pairing.games)
    per_game = len(config.games)
    for _k, spec in enumerate(match_specs(config, pairing, round_no)):
        r = results[spec.match_id]
        total.points_a += r.points(pairing.a) / per_game
        total.points_b += r.points(pairing.b) / per_game
        total.score_a += r.scores[pairing.a]
        total.score_b += r.scores[pairing.b]
    return total


def run_tournament(
    config: TournamentConfig,
    play_matches: PlayMatches | None,
    db_path: str | os.PathLike,
    jsonl_path: str | os.PathLike | None = None,
    on_result: Callable[[MatchResult], None] | None = None,
    on_schedule: Callable[[list[MatchSpec]], None] | None = None,
) -> TournamentResult:
    """Create or resume the tournament in `db_path` and play it to the end.

    Args:
      config: the tournament.
      play_matches: plays a batch of matches (see the module doc); None only replays
        stored results (raises if anything is missing).
      db_path: the SQLite store; created if absent, resumed if present (same config).
      jsonl_path: the trajectory file the arena writes (default: beside the DB).
      on_result: called with each newly stored result (progress bars).
      on_schedule: called with the matches of a round still to play, before they are.
    Returns:
      the TournamentResult, ratings included.
    """
    jsonl = Path(jsonl_path) if jsonl_path is not None else jsonl_beside(db_path)
    with open_or_rebuild(db_path, jsonl) as store:
        _open_tournament(store, config, jsonl, pin=play_matches is not None)
        results = store.results()
        # matches played but not stored (all of them if the DB was lost)
        logged = read_log(jsonl, skip=set(results), sides=config.sides)
        played = recovered = 0
        rounds = itertools.count()

        def play_round(pairings: list[Pairing]) -> list[PairResult]:
            nonlocal played, recovered
            round_no = next(rounds)
            specs = [s for p in pairings for s in match_specs(config, p, round_no)]
            store.add_schedule(specs)
            recovered += _recover(specs, results, logged, store, jsonl)
            todo = [s for s in specs if s.match_id not in results]
            if todo:
                if play_matches is None:
                    raise RuntimeError(
                        f"tournament {config.name!r} in {db_path} is not finished ({len(todo)} matches of round {round_no} missing)"
                    )
                if on_schedule is not None:
                    on_schedule(todo)
                played += _play(todo, play_matches, store, results, on_result)
            return [pair_result(config, p, results, round_no) for p in pairings]

        outcome = drive(config.make_format(), play_round)
        store.set_meta("status", "finished")
        schedule = store.schedule()
        results = store.results()
    result = TournamentResult(
        config, outcome, schedule, results, {}, str(db_path), str(jsonl), recovered, played
    )
    result.missing = missing_trajectories(results, jsonl)
    rate(config, result)
    return result


def _open_tournament(store: Store, config: TournamentConfig, jsonl: Path, pin: bool) -> None:
    """Lock the store and start or resume `config` in it: a restarted tournament moves the old
    config's trajectories aside; pin the players' checkpoints when matches may be played (`pin`:
    a replay of stored results plays none, so a checkpoint that moved on, or that a relative
    path no longer finds from here, changes nothing); check the JSONL is writable."""
    store.lock()
    if (
        store.init(config.to_json(), config.players, key=_resume_key) == "restarted"
        and jsonl.exists()
    ):
        jsonl.rename(
            jsonl.with_name(f"{jsonl.name}.replaced-{int(time.time())}")
        )  # the old config's trajectories, kept aside
    if pin:
        store.pin_checkpoints({name: checkpoint_of(spec) for name, spec in config.players.items()})
    check_writable(jsonl)


def _recover(
    specs: list[MatchSpec],
    results: dict[str, MatchResult],
    logged: dict,
    store: Store,
    jsonl: Path,
) -> int:
    """Store the matches of `specs` found in the JSONL (`logged`, from `read_log`) but not in the
    store; return how many."""
    recovered = 0
    for s in specs:
        if s.match_id not in results and s.match_id in logged:
            results[s.match_id] = logged.pop(s.match_id).check(s, jsonl)
            store.add_result(results[s.match_id])
            recovered += 1
    return recovered


def _play(
    todo: list[MatchSpec],
    play_matches: PlayMatches,
    store: Store,
    results: dict[str, MatchResult],
    on_result: Callable[[MatchResult], None] | None,
) -> int:
    """Play `todo`, storing each result as it comes; return how many were played.

    Raises:
      ValueError: play_matches returned a match not asked for (or twice).
      RuntimeError: play_matches finished without some of the matches.
    """
    played = 0
    wanted = {s.match_id for s in todo}
    for r in play_matches(todo):
        if r.match_id not in wanted:
            raise ValueError(
                f"play_matches returned match {r.match_id!r}, which was not asked for (or twice)"
            )
        wanted.discard(r.match_id)
        store.add_result(r)
        results[r.match_id] = r
        played += 1
        if on_result is not None:
            on_result(r)
    if wanted:
        raise RuntimeError(
            f"play_matches finished without {len(wanted)} of the {len(todo)} matches asked for, e.g. {sorted(wanted)[0]!r}"
        )
    return played


class _Unfinished(Exception):
    """A round of the replay has matches the store does not hold (yet)."""


def tournament_so_far(
    config: TournamentConfig,
    db_path: str | os.PathLike,
    jsonl_path: str | os.PathLike | None = None,
) -> TournamentResult:
    """The tournament in `db_path` as far as it is stored, read without writing anything
    (another process may be running it, the folder may be read-only).

    Returns:
      finished: what `run_tournament` returns for it. Else `finished=False`: the matches
      stored so far, their ratings, and an `outcome` that orders the players by rating
      (the format's ranking exists only at the end), with each player's points so far.
    """
    jsonl = Path(jsonl_path) if jsonl_path is not None else jsonl_beside(db_path)
    with Store(db_path, readonly=True) as store:
        if store.meta("config") is None:
            raise ValueError(f"{db_path} holds no tournament yet")
        diff = store.config_diff(config.to_json(), config.players, key=_resume_key)
        if diff:
            raise ValueError(
                f"{db_path} holds a tournament with a different config (differs in: {diff})"
            )
        schedule, results = store.schedule(), store.results()
    rounds = itertools.count()

    def replay_round(pairings: list[Pairing]) -> list[PairResult]:
        round_no = next(rounds)
        if any(
            s.match_id not in results for p in pairings for s in match_specs(config, p, round_no)
        ):
            raise _Unfinished
        return [pair_result(config, p, results, round_no) for p in pairings]

    result = TournamentResult(config, None, schedule, results, {}, str(db_path), str(jsonl))
    result.missing = missing_trajectories(results, jsonl)
    try:
        result.outcome = drive(config.make_format(), replay_round)
    except _Unfinished:
        result.finished = False
    rate(config, result)
    if not result.finished:
        points = {p: 0.0 for p in config.players}
        if pairwise(config):
            for (
                a,
                b,
                points_a,
            ) in (
                result.games()
            ):  # a pairing's games count one game in all, as the formats count them
                points[a] += points_a / len(config.games)
                points[b] += (1 - points_a) / len(config.games)
        else:
            for f in result.finishes():  # a table's match: the share of sides finished above
                for p, pts in zip(f.seats, f.points()):
                    points[p] += pts
        order = sort_players(list(config.players), lambda p: result.ratings[p].elo)
        result.outcome = Outcome(order, {p: {"points": points[p]} for p in config.players})
    return result


def rate(config: TournamentConfig, result: TournamentResult) -> None:
    """Bradley-Terry over every match, with one first-mover term per game fitted jointly;
    Plackett-Luce over the finishing orders, with a term per game and seat, for games of N
    seats or with teams."""
    ro = config.rating
    if not pairwise(config):
        fit = fit_plackett_luce(
            result.finishes(),
            list(config.players),
            ro.reference,
            ro.ci,
            ro.level,
            ro.bootstrap,
            config.seed,
            seat=True,
        )
        result.ratings, result.seat = fit.ratings, fit.seat
        return
    seat_games = [
        s.game for s in result.schedule if s.match_id in result.results
    ]  # the order of result.games()
    fit = fit_bradley_terry(
        result.games(),
        list(config.players),
        ro.reference,
        ro.ci,
        ro.level,
        ro.bootstrap,
        config.seed,
        seat=seat_games,
    )
    result.ratings, result.seat = fit.ratings, fit.seat


def _resume_key(config_json: str) -> dict:
    return TournamentConfig.from_json(config_json).resume_key()


def load_tournament(
    db_path: str | os.PathLike, jsonl_path: str | os.PathLike | None = None
) -> TournamentResult:
    """A finished tournament from its DB alone (the config is stored in it)."""
    return run_tournament(stored_config(db_path), None, db_path, jsonl_path)
