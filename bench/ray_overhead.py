"""What Ray costs: a bot tournament on 2 Ray workers against the same tournament run locally.

Both paths run `tournaments.run.run_tournament` on the same config into fresh stores
(SQLite + JSONL written by this process); the local one plays through `arena.runner.play`
in this process, the Ray one through `arena.ray_runner.RayPool` (a local Ray instance,
`--workers` match workers of 1 CPU each). Timed: the tournament only (Ray's start and the
workers' agent builds are printed apart: paid once per command). Then the stored results
of the two are compared (they must be identical) and the ratio of matches per second is
printed (target: >= 0.8x with 2 workers on this 2-core machine).

Also measured, for the scaling model of docs/guides/ray.md: the Ray round trip of an empty
chunk (scheduler + object store, no match), the driver's commit rate (one result into
the SQLite store and its record appended to the JSONL with fsync, as the driver does for
every match), and the mean match time on one worker.

    python bench/ray_overhead.py                      # 8 games per pairing, 6 players: 480 matches
    python bench/ray_overhead.py --games 2 --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.by_game import build_agent
from arena.ray_runner import RayPool, append_records, build_players  # noqa: E402
from tournaments.config import load_config  # noqa: E402
from tournaments.matches import arena_play_matches  # noqa: E402
from tournaments.run import run_tournament  # noqa: E402
from tournaments.store import Store  # noqa: E402


def config(games: int, seed: int, simulations: int):
    return load_config(
        {
            "name": "ray overhead",
            "format": "round_robin",
            "players": {
                "random": "random",
                "random2": "random",
                "expert": {"by_game": {"tic_tac_toe": f"mcts:{simulations}", "kuhn_poker": "cfr"}},
                "expert2": {
                    "by_game": {"tic_tac_toe": f"mcts:{simulations // 2}", "kuhn_poker": "cfr"}
                },
                "mixed": {"by_game": {"tic_tac_toe": "mcts:10", "default": "random"}},
                "mixed2": {"by_game": {"kuhn_poker": "cfr", "default": "random"}},
            },
            "games": ["tic_tac_toe", "kuhn_poker"],
            "games_per_pairing": games,
            "seed": seed,
        }
    )


def timed_run(cfg, db: Path, concurrency: int, pool=None, agents=None) -> float:
    jsonl = db.with_suffix(".jsonl")
    start = time.perf_counter()
    run_tournament(
        cfg, arena_play_matches(agents or {}, jsonl, concurrency, 2000, pool=pool), db, jsonl
    )
    return time.perf_counter() - start


def stored(db: Path) -> dict:
    with Store(db, readonly=True) as store:
        return {k: (r.scores, r.outcome, r.error) for k, r in store.results().items()}


def commit_rates(folder: Path, n: int, batch: int = 16) -> dict[str, float]:
    """Results per second a driver stores: JSONL append (fsync each), SQLite insert (one
    synchronous=FULL transaction each), both (the local path per match), and a chunk of
    `batch` records appended with one fsync (the Ray driver's JSONL; its SQLite is per match)."""
    from core.records import MatchRecord, append_jsonl
    from tournaments.store import MatchResult, MatchSpec

    rec = MatchRecord(
        "x",
        "tic_tac_toe",
        {},
        0,
        {"player_0": "a", "player_1": "b"},
        returns={"player_0": 1.0, "player_1": -1.0},
        outcome={"player_0": "win", "player_1": "loss"},
    )
    rates = {}
    for what in ("jsonl", "sqlite", "both"):
        db, jsonl = folder / f"commit-{what}.db", folder / f"commit-{what}.jsonl"
        with Store(db) as store:
            store.init('{"name": "commit"}', {"a": "random", "b": "random"})
            store.add_schedule(
                [MatchSpec(f"m{i}", "tic_tac_toe", {}, 0, ["a", "b"], 0, "RR") for i in range(n)]
            )
            start = time.perf_counter()
            for i in range(n):
                rec.match_id = f"m{i}"
                if what != "sqlite":
                    append_jsonl(jsonl, rec)
                if what != "jsonl":
                    store.add_result(MatchResult.from_record(rec, jsonl))
            rates[what] = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(0, n, batch):
        append_records(
            str(folder / "commit-batched.jsonl"), [rec] * batch
        )  # what the Ray driver does per chunk
    rates[f"jsonl, {batch} per fsync"] = n / (time.perf_counter() - start)
    return rates


def round_trip(pool: RayPool, n: int) -> float:
    """Seconds per empty chunk sent to a worker and answered (sequential calls)."""
    import ray

    w = pool.workers[0]
    ray.get(w.play.remote([], 1, 1))
    start = time.perf_counter()
    for _ in range(n):
        ray.get(w.play.remote([], 1, 1))
    return (time.perf_counter() - start) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--games",
        type=int,
        default=8,
        help="games per pairing and game (6 players: 30 x games matches)",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--simulations",
        type=int,
        default=100,
        help="MCTS simulations of the expert (the heavy bot)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed runs of each path, interleaved, after one warm-up run of each",
    )
    p.add_argument(
        "--quick", action="store_true", help="skip the commit-rate and round-trip probes"
    )
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import ray

    cfg = config(args.games, args.seed, args.simulations)
    print(
        f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; seed {args.seed}, {args.games} games per pairing"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        t1 = time.perf_counter()
        pool = RayPool.start(
            "local", functools.partial(build_players, cfg.players), workers=args.workers
        )
        t2 = time.perf_counter()
        print(
            f"ray start {t1 - t0:.1f} s, {args.workers} workers ready {t2 - t1:.1f} s (once per command, not timed below)"
        )
        agents = {
            n: build_agent(n, s) for n, s in cfg.players.items()
        }  # built once, as the workers' are
        local, on_ray, same = [], [], True
        print(f"{'repeat':<8}{'local s':>9}{'ray s':>9}{'ratio':>8}   (load)")
        for k in range(
            args.repeats + 1
        ):  # run 0 warms both paths (the bots' first-use setup, e.g. the CFR solve); not counted
            lo = timed_run(cfg, folder / f"local{k}.db", args.concurrency, agents=agents)
            ra = timed_run(cfg, folder / f"ray{k}.db", args.concurrency, pool)
            same &= stored(folder / f"ray{k}.db") == stored(folder / f"local{k}.db")
            print(
                f"{k or 'warm-up':<8}{lo:>9.2f}{ra:>9.2f}{lo / ra:>8.2f}   ({os.getloadavg()[0]:.1f})"
            )
            if k:
                local.append(lo)
                on_ray.append(ra)
        n = len(stored(folder / "local0.db"))
        lo, ra = sorted(local)[len(local) // 2], sorted(on_ray)[len(on_ray) // 2]
        print(f"{'path (median)':<22}{'matches':>8}{'seconds':>9}{'matches/s':>11}")
        print(f"{'local (1 process)':<22}{n:>8}{lo:>9.2f}{n / lo:>11.1f}")
        print(f"{f'ray ({args.workers} workers)':<22}{n:>8}{ra:>9.2f}{n / ra:>11.1f}")
        print(
            f"ratio ray / local: {lo / ra:.2f}x (target >= 0.8x); stored results identical in every repeat: {same}; "
            f"chunks retried {pool.retried}"
        )
        print(f"mean match time: {lo / n * 1000:.1f} ms (local, one process, median run)")
        if not args.quick:
            print(f"ray round trip of an empty chunk: {round_trip(pool, 200) * 1000:.2f} ms")
            rates = commit_rates(folder, 400)
            print(
                "driver commit rate, results/s: "
                + ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        pool.shutdown()
        ray.shutdown()
        if not same:
            sys.exit("stored results differ between the local and the Ray run")


if __name__ == "__main__":
    main()
