"""What Ray costs a self-play run: tiny-llama training steps with rollouts on 2 Ray workers
against the same run with rollouts in process, side by side, and the weight-sync bytes.

Both paths run `training.selfplay.train` on the same config (tiny-llama, tic-tac-toe, half
self-play, half against the random bot; no evaluation) from scratch; the runs alternate,
local first, `--repeats` times. Timed: the loop's steps as metrics.jsonl records them
(rollout seconds; the learner's seconds, which on Ray include publishing the weights);
the first step of each run is left out (a worker's first weight load, the first batches'
warm-up). Ray's start and the workers' model load happen before the loop (printed once).

Then the weight sync: the bytes a step publishes (`rollouts.trainable_state` of the
workers' module, in the rollout dtype) for each `--sync-models` model, full and LoRA
(r=16, all linear layers), and the time to put them into Ray's object store and to load
them in a worker.

    python bench/ray_training_step.py --seed 1                  # 6 steps of 32 matches, 3 repeats
    python bench/ray_training_step.py --quick                   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_config(run_dir: Path, args, on_ray: bool) -> dict:
    d = {
        "model": "tiny-llama",
        "seed": args.seed,
        "steps": args.steps,
        "games": ["tic_tac_toe"],
        "run_dir": str(run_dir),
        "matches_per_step": args.matches,
        "concurrency": args.matches,
        "threads": args.threads,
        "checkpoint_every": 0,
        "agent": {
            "prompt": "compact",
            "constrained": True,
            "temperature": 1.0,
            "max_new_tokens": 4,
            "max_retries": 0,
        },
        "learner": {"lr": 1e-3},
        "league": {"self_play": 0.5, "bots": ["random"]},
        "eval": {"every": 0},
    }
    if on_ray:
        d["ray"] = {
            "address": "local",
            "rollout_workers": args.workers,
            "max_staleness": args.max_staleness,
        }
    return d


def timed_steps(run_dir: Path) -> tuple[float, float, int]:
    """(rollout seconds, step seconds, matches) over the run's steps after the first."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    return sum(r["rollout_seconds"] for r in rows), sum(r["step_seconds"] for r in rows), len(rows)


def sync_sizes(models: list[str], workers) -> list[tuple[str, str, int, float, float]]:
    """(model, what, bytes, put seconds, worker load seconds) of one published version."""
    import ray

    from core.machine import compute_dtype
    from training.config import TrainConfig
    from training.learner_config import LearnerConfig
    from training.rollouts import frozen_backend, trainable_state

    out = []
    for model in models:
        for rank in (0, 16):
            cfg = TrainConfig(model=model, learner=LearnerConfig(lora_rank=rank))
            module = frozen_backend(
                cfg.model, cfg.learner, "cpu", dtype=compute_dtype(cfg.learner.precision, "cpu")
            ).model
            state = trainable_state(module, rank > 0)
            nbytes = sum(t.numel() * t.element_size() for t in state.values())
            t0 = time.perf_counter()
            ref = ray.put(state)
            t1 = time.perf_counter()
            ray.get([w.remote(ref) for w in workers])
            t2 = time.perf_counter()
            out.append(
                (
                    model,
                    f"LoRA r={rank}" if rank else f"full ({next(iter(state.values())).dtype})",
                    nbytes,
                    t1 - t0,
                    t2 - t1,
                )
            )
            del module, state, ref
    return out


def fetch(state: dict) -> int:
    """What a worker does with a new version: fetch it from the object store (the copy into its module is not timed)."""
    return len(state)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6, help="steps per run (the first is not timed)")
    p.add_argument("--matches", type=int, default=32, help="matches per step (and concurrency)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the driver (the in-process rollouts and the learner)",
    )
    p.add_argument("--max-staleness", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sync-models", nargs="*", default=["tiny-llama", "smollm2-135m"])
    p.add_argument(
        "--quick",
        action="store_true",
        help="2 steps of 8 matches, one repeat, tiny-llama's sync only",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.matches, args.repeats, args.sync_models = 2, 8, 1, ["tiny-llama"]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import ray
    from rich.console import Console

    from training.selfplay import parse_config, train

    print(
        f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; seed {args.seed}; {args.steps} steps of {args.matches} matches; "
        f"driver threads {args.threads}, {args.workers} Ray workers of 1 CPU, max_staleness {args.max_staleness}"
    )
    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    print(f"ray start {time.perf_counter() - t0:.1f} s (once per run, not timed)")
    quiet = Console(quiet=True)
    rows = {"local": [], "ray": []}
    print(f"{'repeat':<8}{'path':<8}{'rollout s':>10}{'step s':>8}{'matches/s':>11}   (load)")
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            for path in ("local", "ray"):
                run_dir = Path(tmp) / f"{path}{k}"
                train(parse_config(run_config(run_dir, args, path == "ray")), console=quiet)
                roll, step, n = timed_steps(run_dir)
                rows[path].append((roll, step, n))
                print(
                    f"{k:<8}{path:<8}{roll:>10.2f}{step:>8.2f}{n * args.matches / roll:>11.1f}   ({os.getloadavg()[0]:.1f})"
                )
    med = {path: sorted(r)[len(r) // 2] for path, r in rows.items()}
    rate = {path: med[path][2] * args.matches / med[path][0] for path in med}
    step_rate = {path: med[path][2] * args.matches / med[path][1] for path in med}
    print(
        f"rollout matches/s (median run): local {rate['local']:.1f}, ray {rate['ray']:.1f}: ratio ray / local {rate['ray'] / rate['local']:.2f}x"
    )
    print(
        f"whole step (rollouts + update + publish) matches/s: local {step_rate['local']:.1f}, ray {step_rate['ray']:.1f}: "
        f"ratio {step_rate['ray'] / step_rate['local']:.2f}x"
    )
    fetcher = ray.remote(num_cpus=0)(fetch)
    import torch

    ray.get(
        [fetcher.remote({"w": torch.zeros(1)}) for _ in range(args.workers)]
    )  # task workers start and import torch here, untimed
    sync = sync_sizes(args.sync_models, [fetcher] * args.workers)
    for model, what, nbytes, put, get in sync:
        print(
            f"weight sync {model} {what}: {nbytes / 1e6:.2f} MB per version; ray.put {put:.3f} s, {args.workers} workers fetch {get:.3f} s"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    ray.shutdown()
    return {
        "ratio": rate["ray"] / rate["local"],
        "step_ratio": step_rate["ray"] / step_rate["local"],
        "sync": sync,
    }


if __name__ == "__main__":
    main()
