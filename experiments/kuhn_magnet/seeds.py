"""Poker seed sweeps: full-width self-play, sampled self-play with a magnet, and plain self-play.

    python experiments/kuhn_magnet/seeds.py --arms full_width --seeds 20 21 22 23 24 \
        --out runs/kuhn_seeds --json docs/figures/kuhn_full_width.json --png docs/figures/kuhn_full_width.png
    python experiments/kuhn_magnet/seeds.py --game leduc_poker --arms full_width --seeds 20 21 22 23 24 \
        --out runs/leduc_seeds --json docs/figures/leduc_full_width.json --png docs/figures/leduc_full_width.png
    python experiments/kuhn_magnet/seeds.py --game kuhn_poker_3p --seeds 80 81 82 83 84 \
        --out runs/kuhn3_seeds --json docs/figures/kuhn3_full_width.json --png docs/figures/kuhn3_full_width.png

For every seed and arm: `arena train CONFIG --set seed=S --out DIR` with the arm's config
(resumed when DIR holds an unfinished run; `ARMS`: full_width is the game's shipped config,
cfr_plus Leduc's with the CFR+ target, trained in fp32 (cfr_plus_auto the same at `precision:
auto`, bf16 where the CPU has it natively), magnet the sampled Kuhn config, mars the same with the
method's terms off: plain self-play), then
`arena eval --agent llm:DIR --games GAME --exploitability` scores the run's final policy.
Writes a JSON row per run (seed, arm, exploitability, minutes, steps, precision) to `--json` as it goes (a
rerun skips the runs already scored) and the exploitability curves of every run (from each run's
eval.jsonl, kept in its row) to `--png`, and prints each run's best over its second half and
whether the final policy is within 10% of it. One run at a time (`threads: 1` in the configs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from agents.checkpoint import latest_precision
from training.plots import plot_sweep, read_eval

MARS = [
    "--set",
    "advantage.estimator=mars",
    "--set",
    "learner.loss.magnet_coef=0",
    "--set",
    "learner.loss.entropy_coef=0",
]
ARMS = {  # study -> arm -> (config, extra arguments)
    "kuhn_poker": {
        "full_width": ("configs/train_kuhn_tiny.yaml", []),
        "magnet": ("configs/train_kuhn_tiny_sampled.yaml", []),
        "mars": ("configs/train_kuhn_tiny_sampled.yaml", MARS),
    },
    "leduc_poker": {
        "full_width": ("experiments/kuhn_magnet/train_leduc_magnet.yaml", []),
        "cfr_plus": ("configs/train_leduc_tiny.yaml", []),
        "cfr_plus_auto": ("configs/train_leduc_tiny.yaml", ["--set", "learner.precision=auto"]),
    },
    "kuhn_poker_3p": {"full_width": ("configs/train_kuhn3_tiny.yaml", [])},
}
GAMES = {  # study -> the game and its parameters as `arena eval` takes them
    "kuhn_poker": ["kuhn_poker"],
    "leduc_poker": ["leduc_poker"],
    "kuhn_poker_3p": [
        "openspiel:kuhn_poker",
        "--param",
        "players=3",
        "--param",
        "state_text=information_state",
    ],
}


def cli(*args: str) -> None:
    """`arena ARGS` in a child process (the repository's code, as `python -m cli.main`)."""
    subprocess.run([sys.executable, "-m", "cli.main", *args], check=True)


def score(run: Path, game: list[str]) -> dict:
    """The final policy's exploitability and NashConv (arena eval), the run's minutes and steps,
    and the precision it trained in (`precision: auto` picks it per machine)."""
    out = run / "final-eval"
    if not (out / "eval.json").is_file():
        cli(
            "eval",
            "--agent",
            f"llm:{run}",
            "--games",
            *game,
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
        "exploitability": gap["exploitability"],  # None beyond two-player zero-sum games
        "nash_conv": gap["nash_conv"],
        "minutes": last["minutes"],
        "steps": last["step"],
        "precision": latest_precision(run / "checkpoints"),  # None: no checkpoints
        "eval": read_eval(run),  # the curves, so the figure outlives the run folder
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[20, 21, 22, 23, 24])
    ap.add_argument("--game", default="kuhn_poker", choices=list(ARMS))
    ap.add_argument("--arms", nargs="+", default=None, help="default: every arm of the game")
    ap.add_argument("--out", default="runs/kuhn_seeds", help="folder of the runs")
    ap.add_argument("--json", default="docs/figures/kuhn_seeds.json")
    ap.add_argument("--png", default="docs/figures/kuhn_seeds.png")
    args = ap.parse_args()
    arms = ARMS[args.game]
    for arm in args.arms or []:
        if arm not in arms:
            ap.error(f"{args.game} has no arm {arm!r} (arms: {', '.join(arms)})")
    path = Path(args.json)
    rows = json.loads(path.read_text()) if path.is_file() else []
    done = {(r["arm"], r["seed"]) for r in rows}
    for seed in args.seeds:
        for arm in args.arms or list(arms):
            if (arm, seed) in done:
                continue
            run = Path(args.out) / f"{arm}-{seed}"
            if not (run / "final-eval" / "eval.json").is_file():
                config, extra = arms[arm]
                # --resume: a run killed part-way goes on from its last checkpoint (a fresh start without one)
                cli("train", config, "--set", f"seed={seed}", "--out", str(run), "--resume", *extra)
            check_finished(run)
            rows.append({"arm": arm, "seed": seed, "run": str(run), **score(run, GAMES[args.game])})
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rows, indent=1) + "\n")
            print(f"{arm} seed {seed}: NashConv {rows[-1]['nash_conv']:.4f}")
    plot_sweep(rows, args.png, lambda r: f"{r['arm']} {r['seed']}")
    settled = [(r, second_half_best(r)) for r in rows if "eval" in r]
    for r, (best, within) in settled:
        print(
            f"{r['arm']} seed {r['seed']}: best of the second half {best:.4f}, final within 10%: {within}"
        )
    if settled:
        print(
            f"final within 10% of the second half's best: {sum(w for _, (_, w) in settled)} of {len(settled)}"
        )


def second_half_best(row: dict) -> tuple[float, bool]:
    """The best point of a scored row's curve over the run's second half (evaluations at step >=
    half its steps; exploitability, or NashConv where exploitability is None) and whether the
    final policy is within 10% of it: the Leduc claim's reading of a run's end."""
    key = "exploitability" if row["exploitability"] is not None else "nash_conv"
    best = min(
        e[key] for e in row["eval"] if e["step"] >= row["steps"] / 2 and e.get(key) is not None
    )
    return best, row[key] <= 1.1 * best


def check_finished(run: Path) -> None:
    """SystemExit unless the run trained all its steps: a run its `max_minutes` guard stopped
    is not the config's result (rerun the same command to go on from its last checkpoint)."""
    steps = yaml.safe_load((run / "config.yaml").read_text())["steps"]
    lines = (run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])["step"] if lines else 0
    if last < steps:
        raise SystemExit(
            f"{run} stopped at step {last} of {steps} (its max_minutes guard?): not scored; raise max_minutes "
            "in the arm's config (a guard: it does not change the run) and rerun the same command"
        )


if __name__ == "__main__":
    main()
