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
Games played into the tournament (`arena web`'s Play page, `arena env-serve --tournament`:
tournament.people.jsonl) are rated in with the players, and ranked after them.
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
from pathlib import Path
from typing import TYPE_CHECKING

from cli.flags import add_ray, add_threads, ray_options

if TYPE_CHECKING:
    from arena.ray_runner import RayOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena tournament` to `p`."""
    p.add_argument(
        "config",
        help="tournament YAML: players, games, format, rating (e.g. configs/quickstart.yaml)",
    )
    p.add_argument(
        "--db",
        help="SQLite file (default: runs/<name>/tournament.db; trajectories and report beside it)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="only print a finished tournament's leaderboard and rewrite its HTML report",
    )
    add_threads(p)
    add_ray(p)


def run(args: argparse.Namespace) -> None:
    """Create, resume or finish the tournament (or with `--report-only` show it so far), then
    print its leaderboard and write its report."""
    from tournaments.config import arena_options, load_config  # start-up time: this command only

    config = load_config(args.config)
    opts = arena_options(config.arena)
    db = Path(args.db) if args.db else default_db(config.name)
    start = time.perf_counter()
    if args.report_only:
        result = _so_far(config, db)
        if not result.finished:
            return
    else:
        result = _play(config, db, opts, ray_options(args), start)
    _report(_with_people(result, db), db.with_suffix(".html"))


def _with_people(result, db: Path):
    """`result` with the games played into it (the web's Play page, `arena env-serve
    --tournament`) rated in, and a line that says so."""
    from tournaments.people import people_jsonl, with_people  # start-up time: this command only

    out = with_people(result, db)
    if out is not result:
        added = len(out.results) - len(result.results)
        people = ", ".join(p for p in out.config.players if p not in result.config.players)
        print(f"{added} game(s) played into it from {people_jsonl(db)} rated in: {people}")
    return out


def default_db(name: str) -> Path:
    """The store of the tournament `name` when `--db` is not given: runs/<name>/tournament.db."""
    return Path("runs") / re.sub(r"[^\w.-]+", "_", name) / "tournament.db"


def _so_far(config, db: Path):
    """The tournament in `db` as far as it is played (read-only); a tournament that has not
    finished is shown here: its state and leaderboard so far."""
    # start-up time: this command only
    from tournaments.report import print_leaderboard
    from tournaments.run import tournament_so_far
    from tournaments.store import DamagedStore, Store, jsonl_beside

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
    return result


def _play(config, db: Path, opts: dict, ray: RayOptions | None, start: float):
    """Play the tournament in `db` to its end (creating or resuming it) and say what was played."""
    # start-up time: this command only
    from agents.by_game import check_player
    from core.records import check_writable
    from tournaments.store import jsonl_beside, kept_on_interrupt

    jsonl = jsonl_beside(db)
    done = finished(db)
    if not done:  # a player's typo fails here, before the store is announced or made
        for spec in config.players.values():
            check_player(spec, [(g.name, g.params) for g in config.games])
    fresh = not db.parent.exists()
    check_writable(db, jsonl)  # before any model loads
    print(
        f"tournament {config.name!r}: {config.format}, {len(config.players)} players, "
        f"{', '.join(g.name for g in config.games)}; store {db}"
    )
    try:
        result = _run(config, ray, db, jsonl, opts, done)
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
    return result


def _report(result, report: Path) -> None:
    """Print the leaderboard and write the HTML report and its JSON beside it."""
    # start-up time: this command only
    from core.records import check_writable
    from tournaments.report import print_leaderboard, write_html, write_json

    print_leaderboard(result)
    check_writable(report, report.with_suffix(".json"))
    write_html(result, report)
    write_json(result, report.with_suffix(".json"))
    print(f"report: {report} (the leaderboard as data: {report.with_suffix('.json').name})")


def finished(db: Path) -> bool:
    """Is there a finished tournament in `db`? (Then no agent needs to be built.)"""
    from tournaments.store import Store  # start-up time: this command only

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


def _run(config, ray: RayOptions | None, db: Path, jsonl: Path, opts: dict, done: bool):
    """Build the players (unless nothing is left to play) and play the tournament to its end."""
    # start-up time: this command only
    from agents.by_game import build_agent
    from core.progress import Progress
    from tournaments.matches import arena_play_matches
    from tournaments.run import run_tournament

    pool = None
    if ray and not done:
        from arena.ray_runner import build_players, start_pool  # start-up time: --ray only

        pool = start_pool(ray, functools.partial(build_players, config.players))
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
