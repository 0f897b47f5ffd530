"""Train one config on many seeds, then score every final policy against random: a table and a figure.

    python -m experiments.tictactoe_seeds.seed_sweep configs/train_tictactoe_tiny.yaml --seeds 10-19 --parallel 2 \
        --out runs/sweep_tiny --games 2000 --figure docs/figures/tictactoe_seeds.png
    python -m experiments.tictactoe_seeds.seed_sweep configs/train_tictactoe_tiny.yaml --seeds 10,11 --threads 2 --out runs/sweep_tiny_t2

1. For each seed, `arena train` on a copy of the config with that seed and run_dir
   OUT/seed_N (`--parallel` runs at a time, each with the config's threads unless
   `--threads`); a run that already finished (`agents.checkpoint.finished`: its last
   checkpoint is at `steps` or spent `max_minutes`) is not trained again, an interrupted
   one resumes (`--resume`), so the sweep can be restarted.
2. Each run's final policy (the checkpoint a resume would take: `agents.checkpoint.resume_point`,
   the newest intact one, whatever the `latest` pointer names; greedy) plays `--games` fresh matches per
   training game against random, both seats alternating, on evaluation seed
   `--eval-seed` (none of the training run's evaluation seeds): W/D/L, non-losing rate
   with its Wilson 95% CI, per seat; for tic-tac-toe also the exact non-losing rate
   (`evaluation.exact_vs_random`: every random line walked) and perfect play
   (`evaluation.perfect_play`: per seat, the positions the greedy policy reaches against any
   opponent, those with a value-losing move, the loss rate against a perfect adversary);
   `--parallel` seeds scored at a
   time, each process with the runs' thread count.
3. OUT/sweep.md (a Markdown table: seed, minutes, result, CI, per seat, exact) and
   OUT/sweep.json, and with `--figure` a dot-and-CI plot of every seed with the median (its
   rows beside it as FIGURE.json: the figure's data outlives the run folders).

Never sweep the seeds a config was tuned on and report them as unseen.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml


def parse_seeds(text: str) -> list[int]:
    """ "10-19" or "10,12,15" (or a mix: "10-12,15") -> the seeds, in order."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
        except ValueError:
            raise ValueError(f"--seeds: {part!r} is not a seed or a range like 10-19") from None
    if not out:
        raise ValueError("--seeds names no seed")
    return out


def seed_config(config: dict, seed: int, out: Path, threads: int | None) -> dict:
    """The config of one seed's run."""
    cfg = {**config, "seed": seed, "run_dir": str(out / f"seed_{seed}")}
    if threads is not None:
        cfg["threads"] = threads
    return cfg


def contention_warning(parallel: int, threads: int, cpus: int) -> str | None:
    """A warning line when the runs' torch threads outnumber the CPUs: they then contend, and
    a run can hit its time budget (2 tiny runs x 2 threads on a 2-core AMD EPYC: 5-7 s a step,
    against 1.5 s with 1 thread each and 0.95 s for one run alone with 2)."""
    if threads <= 0 or parallel * threads <= cpus:
        return None
    return (
        f"warning: {parallel} runs x {threads} torch threads on {cpus} CPUs contend and slow every run several-fold; "
        f"use --parallel {max(1, cpus // threads)} or --threads {max(1, cpus // parallel)}"
    )


def train_all(
    config: dict, seeds: list[int], out: Path, parallel: int, threads: int | None
) -> None:
    """Run `arena train` for every seed not yet finished, `parallel` at a time; logs in OUT/seed_N.log."""
    from agents.checkpoint import finished

    todo = []
    for seed in seeds:
        cfg = seed_config(config, seed, out, threads)
        path = out / f"seed_{seed}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        run_dir = Path(cfg["run_dir"])
        if not finished(run_dir, int(cfg["steps"]), float(cfg.get("max_minutes") or 0)):
            todo.append((seed, path, (run_dir / "checkpoints").is_dir()))
    running: list[tuple[int, subprocess.Popen]] = []
    while todo or running:
        while todo and len(running) < parallel:
            seed, path, resume = todo.pop(0)
            cmd = [sys.executable, "-m", "cli.main", "train", str(path)] + (
                ["--resume"] if resume else []
            )
            log = open(out / f"seed_{seed}.log", "a")
            print(f"seed {seed}: {' '.join(cmd[2:])}", flush=True)
            running.append((seed, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
        seed, proc = running[0]
        proc.wait()
        running.pop(0)
        if proc.returncode != 0:
            print(
                f"seed {seed}: arena train exited with {proc.returncode}; see {out / f'seed_{seed}.log'}",
                flush=True,
            )


def score(config: dict, seed: int, out: Path, games: int, eval_seed: int) -> dict:
    """The final policy of one seed's run against random: sampled games and, for tic-tac-toe, exact."""
    from agents import make_agent
    from agents.checkpoint import read_meta, resume_point
    from evaluation.metrics import summary
    from evaluation.run import evaluate
    from evaluation.suites import EvalGame

    run_dir = out / f"seed_{seed}"
    last, skipped = resume_point(
        run_dir / "checkpoints"
    )  # the checkpoint a resume would continue from
    if last is None:
        raise ValueError(
            f"seed {seed}: no intact checkpoint in {run_dir / 'checkpoints'}"
            + "".join(f"; {e}" for _, e in skipped)
        )
    for bad, e in skipped:
        print(f"seed {seed}: scoring {last.name}, not {bad.name}: {e}", flush=True)
    meta = read_meta(last)
    agent = make_agent(f"llm:{last},temperature=0", "policy")
    row = {
        "seed": seed,
        "step": int(meta["step"]),
        "minutes": float(meta.get("state", {}).get("elapsed", 0)) / 60,
    }
    for g in config["games"]:
        spec = EvalGame(g["name"], params=dict(g.get("params") or {}), opponents=["random"])
        r = summary(
            evaluate(
                agent,
                [spec],
                games,
                eval_seed,
                name="policy",
                concurrency=int(config.get("concurrency", 64)),
            )
        )[0]
        row.update(
            {
                k: r[k]
                for k in ("games", "wins", "draws", "losses", "non_losing", "ci_low", "ci_high")
            },
            by_seat=r["non_losing_by_seat"],
            game=g["name"],
        )
        if g["name"] == "tic_tac_toe":
            from evaluation.exact_vs_random import PolicyTable, exact_vs_random
            from evaluation.perfect_play import perfect_play

            table = PolicyTable(agent, g["name"], spec.params)
            x, o = exact_vs_random(table)
            row["exact"] = (x.non_losing + o.non_losing) / 2
            walks = [perfect_play(table, seat) for seat in (0, 1)]
            row["perfect_play"] = {
                "positions": [w.positions for w in walks],
                "blunders": [w.blunders for w in walks],
                "adversary_loss": [w.adversary_loss for w in walks],
                "perfect": all(w.perfect and w.adversary_loss == 0 for w in walks),
                "examples": [w.examples for w in walks],
            }
    return row


def _score_in_worker(args: tuple) -> dict:
    config, seed, out, games, eval_seed, threads = args
    from core.machine import set_threads

    set_threads(threads or None, verbose=False)
    return score(config, seed, out, games, eval_seed)


def score_all(
    config: dict,
    seeds: list[int],
    out: Path,
    games: int,
    eval_seed: int,
    parallel: int = 1,
    threads: int = 0,
) -> list[dict]:
    """`score` for every seed, `parallel` processes at a time, each with `threads` torch
    threads (0: chosen from the load, as `arena train` does); rows in seed order, each
    seed's line printed as its turn comes."""
    jobs = [(config, s, out, games, eval_seed, threads) for s in seeds]
    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        if parallel > 1:  # spawned, not forked: this process has torch loaded
            pool = stack.enter_context(
                ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn"))
            )
            results = pool.map(_score_in_worker, jobs)
        else:
            results = map(_score_in_worker, jobs)
        for r in results:
            rows.append(r)
            print(
                f"seed {r['seed']}: step {r['step']}, non-losing {r['non_losing']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
                f"on {r['games']} games ({len(rows)}/{len(jobs)} scored)",
                flush=True,
            )
    return rows


def write_table(rows: list[dict], path: Path, title: str) -> str:
    lines = [
        f"{title}",
        "",
        "| seed | steps | minutes | W / D / L | non-losing [95% CI] | X | O | exact | blunders X, O (positions) | loses to perfect play X, O |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seats = [f"{v:.3f}" for _, v in sorted(r["by_seat"].items())]
        exact = f"{r['exact']:.3f}" if "exact" in r else ""
        pp = r.get("perfect_play")
        walk = (
            f"{pp['blunders'][0]}/{pp['positions'][0]}, {pp['blunders'][1]}/{pp['positions'][1]} | "
            f"{pp['adversary_loss'][0]:.2f}, {pp['adversary_loss'][1]:.2f}"
            if pp
            else " | "
        )
        lines.append(
            f"| {r['seed']} | {r['step']} | {r['minutes']:.1f} | {r['wins']} / {r['draws']} / {r['losses']} | "
            f"{r['non_losing']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {' | '.join(seats)} | {exact} | {walk} |"
        )
    nl = np.array([r["non_losing"] for r in rows])
    lines += [
        "",
        f"median {np.median(nl):.3f}; >= 0.90 for {int((nl >= 0.90).sum())} of {len(nl)} seeds",
    ]
    walked = [r["perfect_play"] for r in rows if "perfect_play" in r]
    if walked:
        lines.append(
            f"perfect play (no value-losing move where the greedy policy reaches, never loses to a "
            f"perfect adversary, both seats): {sum(w['perfect'] for w in walked)} of {len(walked)} seeds"
        )
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def plot(rows: list[dict], path: Path, title: str, target: float = 0.9) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    nl = np.array([r["non_losing"] for r in rows])
    err = np.array(
        [
            [r["non_losing"] - r["ci_low"] for r in rows],
            [r["ci_high"] - r["non_losing"] for r in rows],
        ]
    )
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.errorbar(x, nl, yerr=err, fmt="o", capsize=3, label="final policy, fresh games (95% CI)")
    if all("exact" in r for r in rows):
        ax.plot(x, [r["exact"] for r in rows], "x", color="k", label="exact (every random line)")
    ax.axhline(target, ls="--", color="grey", lw=1, label=f"target {target}")
    ax.axhline(float(np.median(nl)), ls=":", color="C1", lw=1, label=f"median {np.median(nl):.3f}")
    ax.set_xticks(x, [str(r["seed"]) for r in rows])
    ax.set_xlabel("seed")
    ax.set_ylabel("non-losing vs random")
    ax.set_ylim(min(0.5, float(nl.min()) - 0.05), 1.0)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    path.with_suffix(".json").write_text(
        json.dumps(rows, indent=1) + "\n"
    )  # the data beside it: run folders do not last


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--seeds", required=True, help="e.g. 10-19 or 10,11")
    ap.add_argument(
        "--out", required=True, help="folder for the runs (seed_N/), logs, sweep.md and sweep.json"
    )
    ap.add_argument(
        "--parallel", type=int, default=1, help="training runs (and scoring processes) at a time"
    )
    ap.add_argument("--threads", type=int, default=None, help="override the config's threads")
    ap.add_argument(
        "--games", type=int, default=2000, help="fresh evaluation matches per seed (both seats)"
    )
    ap.add_argument("--eval-seed", type=int, default=777, help="seed of the evaluation matches")
    ap.add_argument("--figure", default=None, help="write the plot here (png)")
    ap.add_argument(
        "--score-only", action="store_true", help="do not train; score the runs already in --out"
    )
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    config = yaml.safe_load(Path(args.config).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = int(args.threads or config.get("threads") or 0)  # 0: each run chooses from the load
    if not args.score_only:
        from core.machine import usable_cpus

        warning = contention_warning(args.parallel, threads, usable_cpus())
        if warning:
            print(warning, flush=True)
        train_all(config, seeds, out, args.parallel, args.threads)
    rows = score_all(config, seeds, out, args.games, args.eval_seed, args.parallel, threads)
    (out / "sweep.json").write_text(json.dumps(rows, indent=1))
    title = f"{Path(args.config).name}, seeds {args.seeds}, {threads or 'automatic'} thread(s): {args.games} fresh games vs random each"
    print(write_table(rows, out / "sweep.md", title))
    if args.figure:
        plot(rows, Path(args.figure), title)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
