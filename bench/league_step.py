"""A training step against a league of past snapshots vs a pure self-play step.

    python bench/league_step.py                          # tiny-llama (the tic-tac-toe config's model)
    python bench/league_step.py --model smollm2-135m --lora 8 --matches 16
    python bench/league_step.py --quick                  # a smoke run (tests)

Both paths resume the same prepared checkpoint: the policy, and a league of `--snapshots`
past snapshots (the policy's weights, each nudged by its own small noise so every one is a
distinct model; a LoRA run's snapshots are adapters). Then `arena train`'s own loop
(`training.selfplay.train --resume`) runs `--warmup` + `--steps` steps of the
tic-tac-toe config with

- selfplay  `league.self_play: 1.0`: the policy in every seat (the league is never drawn);
- league    `league.self_play: --self-play` (0.5): the other pairs meet PFSP-drawn snapshots.

A step's time is `step_seconds` of metrics.jsonl (rollout + PPO update; no evaluation or
checkpoint), the median over the timed steps of all repeats (a busy machine's spikes hit
single steps), printed with the rollout alone (a league step learns from fewer policy
turns: the policy holds one seat of a league match).
The league path's steps include reading each snapshot it meets from disk the first time.
Each path runs in its own subprocess, alternating `--repeats` times (selfplay, league,
selfplay, ...) so a change in the machine's load hits both. Target:
league / selfplay <= 1.2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def config(args, path: str) -> dict:
    league = {
        "self_play": 1.0 if path == "selfplay" else args.self_play,
        "bots": [],
        "snapshot_every": 10**6,  # the prepared league; none added
        "max_checkpoints": args.snapshots,
        "max_loaded": args.max_loaded,
    }
    return {
        "model": args.model,
        "seed": args.seed,
        "steps": args.warmup + args.steps,
        "threads": args.threads,
        "games": [{"name": "tic_tac_toe", "params": {"board": "relative"}, "opening": 3}],
        "matches_per_step": args.matches,
        "concurrency": args.matches,
        "minibatches": 4 if args.matches >= 16 else 1,
        "agent": {
            "prompt": "state",
            "system_prompt": "Tic-tac-toe.",
            "constrained": True,
            "temperature": 1.0,
            "max_new_tokens": 4,
            "max_retries": 0,
        },
        "advantage": {"estimator": "mars", "gamma": 0.5, "format_reward": 0.0},
        "learner": {
            "lr": 1e-3 if args.lora == 0 else 1e-4,
            "lora_rank": args.lora,
            "max_grad_norm": 1.0,
        },
        "league": league,
        "eval": {"every": 0},
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
    }


def prepare(args, run: Path) -> None:
    """A step-0 checkpoint whose league holds `--snapshots` distinct snapshots of the policy."""
    import numpy as np
    import torch

    from agents import checkpoint
    from agents.models import load_model
    from training.config import config_dict, parse_config
    from training.league import League
    from training.learner import Learner
    from training.selfplay import save_snapshot, seed_everything

    cfg = parse_config({**config(args, "league"), "run_dir": str(run)})
    seed_everything(cfg.seed)
    model, tok = load_model(cfg.model, dtype="float32")
    learner = Learner(model, tok, cfg.learner)
    trained = [p for p in learner.model.parameters() if p.requires_grad]
    league = League(max_checkpoints=args.snapshots)
    gen = torch.Generator().manual_seed(args.seed)
    for i in range(1, args.snapshots + 1):
        with torch.no_grad():
            for p in trained:  # a distinct model per snapshot, close to the policy
                p.add_(
                    torch.randn(p.shape, generator=gen) * 0.02 * (p.std() if p.numel() > 1 else 1.0)
                )
        path = run / "league" / f"step_{i:08d}.safetensors"
        save_snapshot(learner, path)
        league.add(f"ckpt-{i}", "checkpoint", str(path))
    state = {"advantage": {}, "elapsed": 0.0, "games": 0, "best": -1.0}
    checkpoint.save(
        run / "checkpoints",
        learner,
        0,
        config=config_dict(cfg),
        league=league.state_dict(),
        state=state,
        rng=np.random.default_rng(cfg.seed),
        keep=1,
    )


def run_path(args, path: str, prepared: Path) -> list[tuple[float, float]]:
    """(step seconds, rollout seconds) of each timed step of one path, resumed from a copy of the prepared run."""
    from rich.console import Console

    from training.config import parse_config
    from training.selfplay import train

    run = Path(tempfile.mkdtemp(prefix=f"league-{path}-"))
    try:
        shutil.copytree(prepared, run, dirs_exist_ok=True)
        cfg = parse_config({**config(args, path), "run_dir": str(run)})
        train(cfg, resume=True, console=Console(file=open(os.devnull, "w")))
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step_seconds"], r["rollout_seconds"]) for r in rows[args.warmup :]]
    finally:
        shutil.rmtree(run, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-llama:hidden=128:heads=8")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tune)")
    ap.add_argument("--snapshots", type=int, default=20)
    ap.add_argument(
        "--self-play", type=float, default=0.5, help="league path: share of self-play pairs"
    )
    ap.add_argument(
        "--max-loaded",
        type=int,
        default=2,
        help="league.max_loaded: distinct snapshots a step plays",
    )
    ap.add_argument("--matches", type=int, default=64, help="matches per step")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per path and repeat")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 4 snapshots, 8 matches, 2 steps, 1 repeat"
    )
    ap.add_argument("--_path", help=argparse.SUPPRESS)
    ap.add_argument("--_prepared", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.snapshots, args.matches, args.steps, args.repeats = 4, 8, 2, 1
    if args._path:  # child process: one path
        print(json.dumps(run_path(args, args._path, Path(args._prepared))))
        return {}
    print(
        f"league step bench: model {args.model}{f' LoRA r={args.lora}' if args.lora else ''}, {args.snapshots} snapshots, "
        f"{args.matches} matches/step, league self_play {args.self_play}, max_loaded {args.max_loaded}, "
        f"{args.steps} timed steps (after {args.warmup}) x {args.repeats} repeats per path, threads {args.threads}, seed {args.seed}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    prepared = Path(tempfile.mkdtemp(prefix="league-bench-"))
    try:
        t0 = time.perf_counter()
        prepare(args, prepared)
        print(
            f"prepared {args.snapshots} snapshots in {time.perf_counter() - t0:.1f} s", flush=True
        )
        times: dict[str, list[tuple[float, float]]] = {"selfplay": [], "league": []}
        child = [
            f"--{k.replace('_', '-')}={v}"
            for k, v in vars(args).items()
            if k not in ("quick", "repeats", "_path", "_prepared")
        ]
        for r in range(args.repeats):
            for path in ("selfplay", "league"):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        *child,
                        "--_path",
                        path,
                        "--_prepared",
                        str(prepared),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
                )
                t = [tuple(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]
                times[path] += t
                print(
                    f"  repeat {r + 1} {path:<8} median {statistics.median(x for x, _ in t):6.2f} s/step, rollout {statistics.median(x for _, x in t):6.2f} s "
                    f"({', '.join(f'{x:.2f}' for x, _ in t)})",
                    flush=True,
                )
    finally:
        shutil.rmtree(prepared, ignore_errors=True)
    step = {k: statistics.median(x for x, _ in v) for k, v in times.items()}
    roll = {k: statistics.median(x for _, x in v) for k, v in times.items()}
    print(
        f"median step: selfplay {step['selfplay']:.2f} s, league {step['league']:.2f} s, ratio {step['league'] / step['selfplay']:.2f} (target <= 1.2)   "
        f"rollout alone: {roll['selfplay']:.2f} s, {roll['league']:.2f} s, ratio {roll['league'] / roll['selfplay']:.2f}   "
        f"(the league step learns from fewer policy turns; load average {os.getloadavg()[0]:.2f})"
    )
    return {
        "step": step,
        "rollout": roll,
        "step_ratio": step["league"] / step["selfplay"],
        "rollout_ratio": roll["league"] / roll["selfplay"],
    }


if __name__ == "__main__":
    main()
