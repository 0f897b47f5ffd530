"""`arena tournament CONFIG`: play a tournament through the arena, resumable, with a report.

    arena tournament configs/quickstart.yaml                 # create, or resume after a crash
    arena tournament configs/quickstart.yaml --db t.db       # another store
    arena tournament configs/quickstart.yaml --report-only   # re-render the finished report, or the standing so far

The config (`tournaments.config`) names the players (agent specs for
`agents.make_agent`, or `{by_game: {...}}`), the games and the format. Each format round
is played as one batch by `arena.runner.play` (up to `arena.concurrency` matches live at
once, an LLM agent's turns batched across them); every finished match is appended to
the JSONL beside the DB and then stored (`tournaments.run`). Output, by default in
runs/<name>/: tournament.db (SQLite, WAL), tournament.jsonl (trajectories),
tournament.html (report). Killed at any point (even `kill -9`), the same command finishes
the tournament without losing or repeating a match; with the DB lost, the JSONL rebuilds it.
`--report-only` writes nothing to the store (it reads one in a folder it cannot write,
too): while the tournament runs (or after it stopped) it shows its leaderboard so far. A
damaged DB is moved aside and rebuilt from the JSONL; stored matches the JSONL lacks (it
was deleted while the tournament ran) are counted on stderr and listed in
tournament.missing.txt.

Arena options (`arena:` in the config, `tournaments.config.ARENA_OPTIONS`): concurrency (16), max_turns (2000). Agents are built
before the first match (an LLM loads its model then), and not at all when the tournament
in the store is already finished.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from agents.base import WrongGame
from agents.by_game import build_agent, check_player
from arena.ray_runner import build_players, pool_from_args
from arena.runner import MatchPlan, play
from core.progress import Progress
from core.records import check_writable
from tournaments.config import arena_options, load_config
from tournaments.report import print_leaderboard, write_html, write_json
from tournaments.run import run_tournament, tournament_so_far
from tournaments.store import DamagedStore, MatchResult, Store, jsonl_beside, kept_on_interrupt


def arena_play_matches(
    agents: dict, jsonl: Path, concurrency: int, max_turns: int, progress=None, pool=None
):
    """A `tournaments.run` play_matches that plays `agents` (name -> Agent) through `arena.runner.play`,
    or on the Ray workers of `pool` (`arena.ray_runner.RayPool`, which hold their own agents)."""

    def play_matches(specs) -> Iterator[MatchResult]:
        plans = [
            MatchPlan(s.match_id, s.game, list(s.seats), s.seed, dict(s.params), s.opening)
            for s in specs
        ]
        if pool is not None:
            records = pool.play(plans, concurrency, max_turns, out=str(jsonl), progress=progress)
        else:
            records = play(
                plans,
                agents,
                concurrency=concurrency,
                out=str(jsonl),
                max_turns=max_turns,
                progress=progress,
            )
        try:
            for rec in records:
                yield MatchResult.from_record(rec, jsonl)
        except WrongGame as e:  # a bot asked to play a game it does not know
            raise ValueError(
                f"{e} (a player can use a different agent per game: {{by_game: {{GAME: SPEC, default: SPEC}}}})"
            ) from e

    return play_matches


def finished(db: Path) -> bool:
    """Is there a finished tournament in `db`? (Then no agent needs to be built.)"""

    if not db.is_file():
        return False
    try:
        with Store(db, readonly=True) as store:
            return store.meta("status") == "finished"
    except ValueError:  # not readable as a store: the run's own open gives the error
        return False


def warn_missing(result, listing: Path | None = None) -> None:
    """Say on stderr which stored matches have no trajectory on disk (`TournamentResult.missing`),
    and write their ids, one a line, to `listing` when given."""
    if not result.missing:
        return
    ids = result.missing
    where = ""
    if listing is not None:
        listing.write_text("".join(f"{m}\n" for m in ids), encoding="utf-8")
        where = f"; their ids are in {listing}"
    print(
        f"warning: {len(ids)} of the {len(result.results)} stored matches have no trajectory in "
        f"{result.jsonl_path} (deleted or replaced while the tournament ran?), e.g. {ids[0]!r}{where}; "
        "the results and ratings stand, only those trajectories are lost",
        file=sys.stderr,
    )


def default_db(name: str) -> Path:
    return Path("runs") / re.sub(r"[^\w.-]+", "_", name) / "tournament.db"


def _run(config, args, db: Path, jsonl: Path, opts: dict, done: bool):
    """Build the players (unless nothing is left to play) and play the tournament to its end."""
    pool = None
    if getattr(args, "ray", None) and not done:
        pool = pool_from_args(args, functools.partial(build_players, config.players))
    agents = (
        {}
        if done or pool
        else {name: build_agent(name, spec) for name, spec in config.players.items()}
    )
    with Progress(desc=config.name, disable=done) as bar:
        play_matches = arena_play_matches(
            agents, jsonl, opts["concurrency"], opts["max_turns"], bar, pool
        )
        return run_tournament(
            config, play_matches, db, jsonl, on_schedule=lambda todo: bar.add_total(len(todo))
        )


def main(args: argparse.Namespace) -> None:

    config = load_config(args.config)
    opts = arena_options(config.arena)
    db = Path(args.db) if getattr(args, "db", None) else default_db(config.name)
    report = db.with_suffix(".html")
    start = time.perf_counter()
    if getattr(args, "report_only", False):
        try:
            result = tournament_so_far(config, db)  # read-only; this config's rating options apply
        except DamagedStore as e:
            raise ValueError(
                f"{e}; the same command without --report-only moves it aside and rebuilds the "
                f"store from {jsonl_beside(db)}, if that file holds its matches"
            ) from None
        warn_missing(result)
        if not result.finished:
            state = (
                "is running"
                if Store.running(db)
                else "stopped before its end (the same command without --report-only finishes it)"
            )
            print(
                f"tournament {config.name!r} {state}: {len(result.results)} of the {len(result.schedule)} matches scheduled so far "
                f"are played; players ranked by rating so far (the report is written at the end)"
            )
            print_leaderboard(result)
            return
    else:
        jsonl = jsonl_beside(db)
        done = finished(db)
        if not done:  # a player's typo fails here, before the store is announced or made
            for spec in config.players.values():
                check_player(spec)
        fresh = not db.parent.exists()
        check_writable(db, jsonl)  # before any model loads
        print(
            f"tournament {config.name!r}: {config.format}, {len(config.players)} players, "
            f"{', '.join(g.name for g in config.games)}; store {db}"
        )
        try:
            result = _run(config, args, db, jsonl, opts, done)
        except KeyboardInterrupt:  # Ctrl-C: say what is kept and how to go on (cli.main prints it)
            raise KeyboardInterrupt(kept_on_interrupt(db)) from None
        finally:  # stopped before anything was stored (a model that fails to load): no empty folder
            if fresh and db.parent.is_dir() and not any(db.parent.iterdir()):
                db.parent.rmdir()
        if result.recovered:
            print(
                f"recovered {result.recovered} match(es) from {jsonl} that the store had not recorded"
            )
        print(
            f"{result.played} match(es) played now, {len(result.results)} in all, {time.perf_counter() - start:.1f} s"
        )
        warn_missing(result, listing=db.with_suffix(".missing.txt"))
    print_leaderboard(result)
    check_writable(report, report.with_suffix(".json"))
    write_html(result, report)
    write_json(result, report.with_suffix(".json"))
    print(f"report: {report} (the leaderboard as data: {report.with_suffix('.json').name})")
