"""Kuhn poker seed sweep: the shipped config (magnet) and plain self-play (mars) on the same seeds.

    python experiments/kuhn_magnet/seeds.py --seeds 20 21 22 23 24 --out runs/kuhn_seeds

For every seed and arm: `arena train configs/train_kuhn_tiny.yaml --set seed=S --out DIR` (the mars
arm adds `--set advantage.estimator=mars --set learner.loss.magnet_coef=0 --set
learner.loss.entropy_coef=0`: plain self-play, the method's terms off), then
`arena eval --agent llm:DIR --games kuhn_poker --exploitability` scores the run's final policy.
Writes a JSON row per run (seed, arm, exploitability, minutes, steps) to `--json` as it goes (a
rerun skips the runs already scored) and the exploitability curves of every run (from each run's
eval.jsonl) to `--png`. One run at a time (`threads: 1` in the config).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from training.plots import plot_eval

CONFIG = "configs/train_kuhn_tiny.yaml"
ARMS = {
    "magnet": [],
    "mars": [
        "--set",
        "advantage.estimator=mars",
        "--set",
        "learner.loss.magnet_coef=0",
        "--set",
        "learner.loss.entropy_coef=0",
    ],
}


def cli(*args: str) -> None:
    """`arena ARGS` in a child process (the repository's code, as `python -m cli.main`)."""
    subprocess.run([sys.executable, "-m", "cli.main", *args], check=True)


def score(run: Path) -> dict:
    """The final policy's exploitability (arena eval) and the run's minutes and steps."""
    out = run / "final-eval"
    if not (out / "eval.json").is_file():
        cli(
            "eval",
            "--agent",
            f"llm:{run}",
            "--games",
            "kuhn_poker",
            "--exploitability",
            "--matches",
            "2",
            "--out",
            str(out),
        )
    rows = json.loads((out / "eval.json").read_text())
    gap = next(r for r in rows if r.get("kind") == "exploitability")
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    return {
        "exploitability": gap["exploitability"],
        "minutes": last["minutes"],
        "steps": last["step"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[20, 21, 22, 23, 24])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--out", default="runs/kuhn_seeds", help="folder of the runs")
    ap.add_argument("--json", default="docs/figures/kuhn_seeds.json")
    ap.add_argument("--png", default="docs/figures/kuhn_seeds.png")
    args = ap.parse_args()
    path = Path(args.json)
    rows = json.loads(path.read_text()) if path.is_file() else []
    done = {(r["arm"], r["seed"]) for r in rows}
    for seed in args.seeds:
        for arm in args.arms:
            if (arm, seed) in done:
                continue
            run = Path(args.out) / f"{arm}-{seed}"
            if not (run / "final-eval" / "eval.json").is_file():
                cli("train", CONFIG, "--set", f"seed={seed}", "--out", str(run), *ARMS[arm])
            rows.append({"arm": arm, "seed": seed, "run": str(run), **score(run)})
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rows, indent=1) + "\n")
            print(f"{arm} seed {seed}: exploitability {rows[-1]['exploitability']:.4f}")
    runs = [Path(r["run"]) for r in rows if Path(r["run"]).is_dir()]
    if runs:
        labels = [f"{r['arm']} {r['seed']}" for r in rows if Path(r["run"]).is_dir()]
        plot_eval(runs, args.png, labels=labels, target=None)


if __name__ == "__main__":
    main()
