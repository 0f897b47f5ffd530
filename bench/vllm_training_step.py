"""The whole training step: transformers rollouts and one learner row per sequence, against vLLM
rollouts and the shared-prefix learner.

    python bench/vllm_training_step.py                    # SmolLM2-135M, configs/train_mars_smollm2.yaml, 12 matches a step
    python bench/vllm_training_step.py --same-learner     # the rollouts alone differ: both paths take the config's learner
    python bench/vllm_training_step.py --seeds 1 2 3 --repeats 1  # three seeds' matches, pooled
    python bench/vllm_training_step.py --repeats 3 --numerics
    python bench/vllm_training_step.py --quick            # smoke run

Run it in the vLLM venv (docs/guides/vllm.md). Each path runs `arena train`'s own loop
(`training.selfplay.train`) on `--config` with `--warmup` + `--steps` steps, evaluation off,
in its own subprocess; the paths alternate `--repeats` times (transformers, vllm,
transformers, ...) so a change in the machine's load hits both:

- transformers  `backend: transformers`: rollouts on the learner's own module (its compute
                dtype, `learner.precision`: auto = bf16 on a CPU with native bf16), the
                learner with one row per sequence (`learner.shared_prefix: false`);
- vllm          `backend: vllm`: the in-process vLLM engine (dtype `--vllm-dtype`, default
                the learner's; prefix caching on), the learner's weights loaded into it after
                every update; the learner recomputes the behaviour logprobs unless both are fp32
                (`training.setup.behaviour_recompute`); the shared-prefix learner
                (`learner.shared_prefix: true`: each shared prompt computed once).

With `--same-learner` both paths keep the config's `learner.shared_prefix`, so only the
rollouts differ.

Both start from the same seed, so they plan the same matches (games, deals, seats); the
sampled replies, and so the turns, differ: an invalid reply ends a match, so one seed's
samples can make one path's matches longer. `--seeds A B C` runs every path from each seed
and pools the steps. From metrics.jsonl of each timed step: matches per minute of the
rollouts and of the whole step (rollout + PPO update, no evaluation or checkpoint; all
timed matches over all timed seconds), policy turns per minute of the whole step (the same,
per turn), the rollout share of the step, and MFU (model FLOPs utilisation,
`machine_limit.utilisation`: the rollout's prompt + completion FLOPs, the learner's 3x
forward FLOPs (the KL reference's forward not counted), over the matmul FLOP/s of the path's
dtype measured in this run at `--threads`); the other columns are medians over all timed
steps of all seeds and repeats. vLLM generates on 1 torch thread (`VLLMBackend(threads=1)`), the
learner on `--threads`.
`--numerics`: one more vLLM step that keeps the engine's logprobs as behaviour logprobs,
printing the first update's ratio range and clip fraction against the learner (what decides
`behaviour_recompute`). Target: vllm / transformers matches per minute of the whole step >= 2x.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine_limit, run as a script or loaded

PATHS = ("transformers", "vllm")
LEARNER_NAMES = {True: "shared prefix", False: "per sequence", "auto": "shared auto"}
METRICS = (
    "rollout_seconds",
    "learn_seconds",
    "step_seconds",
    "rollout_tokens_per_s",
    "learn_tokens_per_s",
    "policy_turns",
    "response_length",
    "samples",
    "ratio_min",
    "ratio_max",
    "clip_frac",
    "approx_kl_behaviour",
)


def overrides(args, path: str, run_dir: str) -> dict:
    kwargs = {}
    if path != "transformers":
        kwargs = {
            "gpu_memory_utilization": args.vllm_memory,
            **({"dtype": args.vllm_dtype} if args.vllm_dtype else {}),
        }
    learner = {} if args.same_learner else {"learner": {"shared_prefix": path != "transformers"}}
    return {
        **learner,
        "backend": "transformers" if path == "transformers" else "vllm",
        "backend_kwargs": kwargs,
        "steps": 1 if path == "vllm-engine-logprobs" else args.warmup + args.steps,
        "threads": args.threads,
        "seed": args.seed,
        "run_dir": run_dir,
        "matches_per_step": args.matches,
        "concurrency": args.matches,
        "eval": {"every": 0},
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
    }


def run_path(args, path: str) -> dict:
    """One path in this process: {"dtype": rollout dtype, "learner": learner dtype, "shared_prefix":
    whether the learner shares prefixes, "steps": [metrics of each timed step]}."""
    from rich.console import Console

    from core.machine import compute_dtype
    from training import selfplay
    from training.config import load_config

    if (
        path == "vllm-engine-logprobs"
    ):  # measure the engine's logprobs against the learner's, whatever the dtypes
        selfplay.behaviour_recompute = lambda cfg, learner: "constrained"
    run = tempfile.mkdtemp(prefix=f"vllm-bench-{path}-")
    try:
        cfg = load_config(args.config, overrides(args, path, run))
        learner_dtype = compute_dtype(cfg.learner.precision)
        shared = cfg.learner.shared_prefix  # True, False or "auto" (on on a CPU, off on a GPU)
        selfplay.train(cfg, console=Console(file=open(os.devnull, "w")))
        rows = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]
    finally:
        shutil.rmtree(run, ignore_errors=True)
    rows = rows if path == "vllm-engine-logprobs" else rows[args.warmup :]
    return {
        "dtype": cfg.backend_kwargs.get("dtype", learner_dtype),
        "learner": learner_dtype,
        "shared_prefix": shared,
        "steps": [{k: r.get(k, float("nan")) for k in METRICS} for r in rows],
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--config",
        default=str(Path(__file__).resolve().parent.parent / "configs" / "train_mars_smollm2.yaml"),
    )
    ap.add_argument("--matches", type=int, default=12, help="matches per step (all live at once)")
    ap.add_argument("--vllm-dtype", default="", help="the engine's dtype (default: the learner's)")
    ap.add_argument(
        "--vllm-memory",
        type=float,
        default=0.2,
        help="the engine's share of RAM, weights and KV cache (gpu_memory_utilization; 0.08 left no KV cache for SmolLM2-135M here)",
    )
    ap.add_argument("--steps", type=int, default=2, help="timed steps per path and repeat")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="steps first, not timed (vLLM compiles on its first call)",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the learner and the transformers rollouts",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="run every path from each of these seeds (default: --seed) and pool their steps: the "
        "sampled replies decide how long the matches last, so one seed's steps can favour a path",
    )
    ap.add_argument(
        "--same-learner",
        action="store_true",
        help="both paths keep the config's learner.shared_prefix (default: transformers one row per sequence, vllm shared prefix)",
    )
    ap.add_argument(
        "--numerics",
        action="store_true",
        help="also: the first update's ratio with the engine's own logprobs",
    )
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 2 matches, 1 timed step, 1 repeat"
    )
    ap.add_argument(
        "--json", metavar="PATH", help="also write the results (per path, the ratios) there"
    )
    ap.add_argument("--_path", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.matches, args.steps, args.warmup, args.repeats = 2, 1, 1, 1
    seeds = args.seeds or [args.seed]
    if args._path:  # child process: one path
        print(json.dumps(run_path(args, args._path)))
        return {}
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise SystemExit(
            "this bench needs vllm: run it in the vLLM venv (docs/guides/vllm.md)"
        ) from None
    print(
        f"vLLM training-step bench: {Path(args.config).name}, {args.matches} matches a step, {args.steps} timed steps (after "
        f"{args.warmup}) x {args.repeats} repeats per path, threads {args.threads}, seeds {' '.join(map(str, seeds))}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    child = [
        f"--{k.replace('_', '-')}={v}"
        for k, v in vars(args).items()
        if k
        not in ("quick", "repeats", "numerics", "_path", "same_learner", "json", "seed", "seeds")
    ] + (["--same-learner"] if args.same_learner else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}

    def child_run(path: str, seed: int) -> dict:
        out = subprocess.run(
            [sys.executable, __file__, *child, f"--seed={seed}", "--_path", path],
            capture_output=True,
            text=True,
            env=env,
        )
        if out.returncode != 0:
            raise SystemExit(
                f"{path} path failed (exit code {out.returncode}; -9: killed, e.g. out of memory): "
                + " | ".join(out.stderr.strip().splitlines()[-3:])
            )
        return json.loads(out.stdout.strip().splitlines()[-1])

    runs: dict[str, list[dict]] = {p: [] for p in PATHS}
    dtypes: dict[str, tuple[str, str]] = {}
    shared: dict[str, bool | str] = {}
    for r in range(args.repeats):
        for seed, path in itertools.product(seeds, PATHS):
            res = child_run(path, seed)
            runs[path] += res["steps"]
            dtypes[path] = (res["dtype"], res["learner"])
            shared[path] = res["shared_prefix"]
            learner = LEARNER_NAMES[res["shared_prefix"]]
            print(
                f"  repeat {r + 1} seed {seed} {path:<12} rollout dtype {res['dtype']}, learner {res['learner']} {learner}: step "
                + ", ".join(
                    f"{s['step_seconds']:.1f} s (rollout {s['rollout_seconds']:.1f}, {s['policy_turns']:.0f} turns)"
                    for s in res["steps"]
                )
                + f"; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    numerics = None
    if args.numerics:
        numerics = child_run("vllm-engine-logprobs", seeds[0])
        s = numerics["steps"][0]
        print(
            f"  engine logprobs as behaviour ({numerics['dtype']} engine, {numerics['learner']} learner), first update: ratio "
            f"{s['ratio_min']:.4f}-{s['ratio_max']:.4f}, clip fraction {s['clip_frac']:.4f}, KL(behaviour) {s['approx_kl_behaviour']:.2e}",
            flush=True,
        )

    from machine_limit import measure as measure_machine
    from machine_limit import model_config

    from core.machine import model_flops, set_threads

    set_threads(args.threads, verbose=False)
    model = load_config_model(args.config)
    machine, config = measure_machine(model, seconds=1.0), model_config(model)

    def mfu(s: dict, dtypes_: tuple[str, str]) -> dict[str, float]:
        """Model FLOPs utilisation of one step's rollout, update, and the whole step."""
        roll_tokens, learn_tokens = (
            s["rollout_tokens_per_s"] * s["rollout_seconds"],
            s["learn_tokens_per_s"] * s["learn_seconds"],
        )
        completion = (
            s["response_length"] * s["policy_turns"]
        )  # the learner's samples are the same turns
        roll = model_flops(
            config,
            roll_tokens - completion,
            completion,
            round(roll_tokens / max(s["policy_turns"], 1) / 2),
        )
        learn = 3 * model_flops(
            config,
            learn_tokens - completion,
            completion,
            round(learn_tokens / max(s["samples"], 1) / 2),
        )
        rate = {"rollout": machine["flops"][dtypes_[0]], "learn": machine["flops"][dtypes_[1]]}
        return {
            "mfu_rollout": roll / s["rollout_seconds"] / rate["rollout"],
            "mfu_learn": learn / s["learn_seconds"] / rate["learn"],
            "mfu_step": (roll + learn) / s["step_seconds"] / max(rate.values()),
        }

    table = {}
    for path, steps in runs.items():
        med = {k: statistics.median(s[k] for s in steps) for k in METRICS}
        utils = [mfu(s, dtypes[path]) for s in steps]
        table[path] = {
            "rollout_dtype": dtypes[path][0],
            "learner_dtype": dtypes[path][1],
            "shared_prefix": shared[path],
            "matches_per_min_rollout": args.matches
            * len(steps)
            * 60
            / sum(s["rollout_seconds"] for s in steps),
            "matches_per_min_step": args.matches
            * len(steps)
            * 60
            / sum(s["step_seconds"] for s in steps),
            "turns_per_min_step": 60
            * sum(s["policy_turns"] for s in steps)
            / sum(s["step_seconds"] for s in steps),
            "rollout_share": statistics.median(
                s["rollout_seconds"] / s["step_seconds"] for s in steps
            ),
            **{k: statistics.median(u[k] for u in utils) for k in utils[0]},
            **med,
        }
    print(
        f"\n{'path':<13}{'learner':>14}{'rollout/learner dtype':>22}{'matches/min rollout':>21}{'matches/min step':>18}{'rollout s':>11}"
        f"{'learn s':>9}{'rollout share':>15}{'turns':>7}{'tokens/s rollout/learn':>24}{'MFU rollout/learn/step':>24}"
    )
    for path, t in table.items():
        print(
            f"{path:<13}{LEARNER_NAMES[t['shared_prefix']]:>14}{t['rollout_dtype'] + '/' + t['learner_dtype']:>22}{t['matches_per_min_rollout']:>21.1f}{t['matches_per_min_step']:>18.1f}"
            f"{t['rollout_seconds']:>11.1f}{t['learn_seconds']:>9.1f}{t['rollout_share']:>15.0%}{t['policy_turns']:>7.0f}"
            f"{t['rollout_tokens_per_s']:>17.0f}/{t['learn_tokens_per_s']:<6.0f}"
            f"{t['mfu_rollout']:>10.1%}/{t['mfu_learn']:.1%}/{t['mfu_step']:.1%}"
        )
    roll = (
        table["vllm"]["matches_per_min_rollout"] / table["transformers"]["matches_per_min_rollout"]
    )
    step = table["vllm"]["matches_per_min_step"] / table["transformers"]["matches_per_min_step"]
    per_turn = table["vllm"]["turns_per_min_step"] / table["transformers"]["turns_per_min_step"]
    f32, b16 = machine["flops"]["float32"], machine["flops"]["bfloat16"]
    print(
        f"matmul at {machine['threads']} thread(s): fp32 {f32 / 1e9:.0f}, bf16 {b16 / 1e9:.0f} GFLOP/s. MFU counts every prompt "
        f"token as computed: prefix caching (vLLM) and prefix sharing (transformers) skip some, so it can pass 100%"
    )
    paths = " / ".join(
        f"{p} ({LEARNER_NAMES[table[p]['shared_prefix']]})" for p in ("vllm", "transformers")
    )
    print(
        f"{paths} matches per minute: rollouts {roll:.2f}x, whole step {step:.2f}x (target >= 2x: "
        f"{'met' if step >= 2 else 'MISSED'} for the step, {'met' if roll >= 2 else 'MISSED'} for the rollouts); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"per policy turn (the paths sample different replies, so their matches last different numbers of "
        f"turns): whole step {per_turn:.2f}x"
    )
    result = {
        "config": args.config,
        "seeds": seeds,
        "matches": args.matches,
        "threads": args.threads,
        "paths": table,
        "rollout_ratio": roll,
        "step_ratio": step,
        "turn_ratio": per_turn,
        "numerics": numerics,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


def load_config_model(path: str) -> str:
    import yaml

    return yaml.safe_load(Path(path).read_text())["model"]


if __name__ == "__main__":
    main()
