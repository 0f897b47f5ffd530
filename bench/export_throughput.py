"""How long `arena export` takes on a 10,000-match tournament, against reading its JSONL.

    python bench/export_throughput.py                       # 10,000 matches, 3 alternating repeats
    python bench/export_throughput.py --quick               # 200 matches, one repeat (smoke run)
    python bench/export_throughput.py --json docs/figures/export_throughput.json

The tournament file is made of real records: tic-tac-toe matches played here by the arena's
runner, bots (random, MCTS with 10 simulations) and, in `--llm-share` of the matches, the
tiny Llama as a constrained LLM agent (its records carry what an LLM's do: chat messages,
prompt and completion token ids, behaviour logprobs, attempts), as in the quick-start
tournament where one LLM plays 2 of the 5 players' pairings. `--base` matches are played
and the file repeats them under new match ids up to `--matches` (written by
`MatchRecord.to_json`, the tournament writer's own serialiser).

Measured side by side, alternating, the median of `--repeats`: reading the file into match
records (`arena.dataset.read_records`: the JSON parse every export pays), then each export:
Parquet with a row per agent turn, Parquet with a row per match, a `datasets` folder (when
`datasets` is installed), and OpenSpiel trajectories (which replay every match through the
game; measured once). The ratios are each export's time over the read's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def hardware() -> str:
    import torch

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    flags = Path("/proc/cpuinfo").read_text()
    bf16 = ", AVX-512 BF16" if "avx512_bf16" in flags else ""
    return f"{model}, {os.cpu_count()} cores{bf16}; torch {torch.__version__}"


def base_matches(n: int, llm: int, seed: int) -> list:
    """`n` bot matches and `llm` LLM matches of tic-tac-toe, played by the arena's runner."""
    from agents import make_agent
    from agents.bots import MCTSAgent, RandomAgent
    from arena.runner import plan_matches, play

    bots = {"random": RandomAgent("random"), "mcts:10": MCTSAgent("mcts:10", 10)}
    records = list(
        play(plan_matches("tic_tac_toe", list(bots), n, seed=seed, opening=1), bots, concurrency=64)
    )
    if llm:
        agents = {
            "llm": make_agent("llm:tiny-llama,constrained=true,temperature=1", "llm"),
            "random": bots["random"],
        }
        plans = plan_matches("tic_tac_toe", list(agents), llm, seed=seed, prefix="llm")
        records += list(play(plans, agents, concurrency=64))
    return records


def write_tournament(path: Path, base: list, matches: int, llm_share: float) -> None:
    """`matches` records cycling through the base ones (LLM matches in `llm_share` of them)."""
    llm = [r for r in base if "llm" in r.seats.values()]
    bots = [r for r in base if "llm" not in r.seats.values()]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(matches):
            pool = llm if llm and (i % 100) < llm_share * 100 else bots
            rec = replace(pool[i % len(pool)], match_id=f"t-{i:06d}", seed=i)
            f.write(rec.to_json() + "\n")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--matches", type=int, default=10_000, help="matches in the tournament file")
    p.add_argument("--base", type=int, default=400, help="bot matches actually played")
    p.add_argument("--llm", type=int, default=40, help="LLM matches actually played")
    p.add_argument("--llm-share", type=float, default=0.4, help="share of LLM matches in the file")
    p.add_argument("--repeats", type=int, default=3, help="alternating repeats; the median counts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here (docs/figures/export_throughput.json)")
    p.add_argument("--quick", action="store_true", help="200 matches, one repeat (smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.matches, args.base, args.llm, args.repeats = 200, 20, 4, 1

    from rich.console import Console
    from rich.table import Table

    from arena.dataset import export_trajectories, read_records
    from arena.openspiel_trajectories import export_openspiel

    try:
        import datasets  # optional: the export extra  # noqa: F401

        has_datasets = True
    except ImportError:
        has_datasets = False

    start = time.perf_counter()
    base = base_matches(args.base, args.llm, args.seed)
    played_s = time.perf_counter() - start
    tmp = Path(tempfile.mkdtemp(prefix="export-bench-"))
    try:
        source = tmp / "tournament.jsonl"
        write_tournament(source, base, args.matches, args.llm_share)
        paths = {
            "parquet, a row per turn": tmp / "turns.parquet",
            "parquet, a row per match": tmp / "matches.parquet",
            "datasets folder, a row per turn": tmp / "hf",
        }
        jobs = {
            "read the JSONL": lambda: sum(1 for _ in read_records(source)),
            "parquet, a row per turn": lambda: export_trajectories(
                [source], paths["parquet, a row per turn"], overwrite=True
            ),
            "parquet, a row per match": lambda: export_trajectories(
                [source], paths["parquet, a row per match"], per="match", overwrite=True
            ),
        }
        if has_datasets:
            jobs["datasets folder, a row per turn"] = lambda: export_trajectories(
                [source], paths["datasets folder, a row per turn"], format="hf", overwrite=True
            )
        times: dict[str, list[float]] = {k: [] for k in jobs}
        for _ in range(args.repeats):
            for name, job in jobs.items():
                times[name].append(timed(job))
        openspiel_s = timed(lambda: export_openspiel([source], tmp / "os.jsonl", overwrite=True))
        median = {k: float(np.median(v)) for k, v in times.items()}
        median["openspiel trajectories (replays every match)"] = openspiel_s
        paths["openspiel trajectories (replays every match)"] = tmp / "os.jsonl"
        read = median["read the JSONL"]
        rows = export_trajectories([source], tmp / "count", overwrite=True).rows

        def size(path: Path) -> float:
            if path.is_dir():
                return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20
            return path.stat().st_size / 2**20

        table = Table(
            title=f"{args.matches:,} matches ({rows:,} agent turns), "
            f"{size(source):.1f} MiB of JSONL; median of {args.repeats}"
        )
        for col in ("job", "seconds", "matches/s", "vs reading", "MiB written"):
            table.add_column(col, justify="left" if col == "job" else "right")
        results = {}
        for name, s in median.items():
            out = paths.get(name)
            results[name] = {
                "seconds": round(s, 3),
                "matches_per_s": round(args.matches / s),
                "vs_read": round(s / read, 2),
                "mib": round(size(out), 2) if out is not None else round(size(source), 2),
            }
            table.add_row(
                name,
                f"{s:.2f}",
                f"{args.matches / s:,.0f}",
                f"{s / read:.2f}x",
                f"{results[name]['mib']:.2f}",
            )
        Console().print(table)
        print(f"(the {len(base)} base matches were played in {played_s:.0f} s, not timed above)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {
        "bench": "export_throughput",
        "command": "python bench/export_throughput.py --json docs/figures/export_throughput.json",
        "hardware": hardware(),
        "date": time.strftime("%Y-%m-%d"),
        "load": round(os.getloadavg()[0], 1),
        "matches": args.matches,
        "agent_turns": rows,
        "llm_share": args.llm_share,
        "jsonl_mib": results["read the JSONL"]["mib"],
        "repeats": args.repeats,
        "results": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
        print(f"figures: {args.json}")
    return figures


if __name__ == "__main__":
    main()
