"""Tic-tac-toe perfect play on unseen seeds: full-width self-play, scored by walking the tree.

    python experiments/tictactoe_perfect_play/sweep.py --seeds 30 31 32 33 34 35 36 37 38 39 \
        --out runs/tictactoe_full_width \
        --json docs/figures/tictactoe_full_width.json --png docs/figures/tictactoe_full_width.png

For every seed: `arena train configs/train_tictactoe_full_width.yaml --set seed=S --out DIR`
(skipped when DIR holds a finished run; resumed when it holds an unfinished one), then
`python -m evaluation.perfect_play llm:DIR --json DIR/perfect_play.json` walks the final
policy, greedy, in both seats: the positions it reaches against any opponent, those where its
move lowers the game-theoretic value, and its loss rate against a perfect adversary. A seed
reaches perfect play when both seats have no blunder and never lose. Writes a JSON row per
seed to `--json` as it goes and every run's evaluation curves (blunders per seat against step
and minutes, from each run's eval.jsonl, kept in its row) to `--png`. One run at a time (`threads: 1`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from training.plots import plot_sweep, read_eval

CONFIG = "configs/train_tictactoe_full_width.yaml"


def finished(run: Path) -> bool:
    """Whether the run's metrics reach the steps its saved config asks for."""
    if not (run / "config.yaml").is_file() or not (run / "metrics.jsonl").is_file():
        return False
    lines = (run / "metrics.jsonl").read_text().splitlines()
    steps = yaml.safe_load((run / "config.yaml").read_text())["steps"]
    return bool(lines) and json.loads(lines[-1])["step"] >= steps


def score(run: Path) -> dict:
    """The final policy's tree walk in both seats, and the run's minutes and steps."""
    out = run / "perfect_play.json"
    if not out.is_file():
        subprocess.run(
            [sys.executable, "-m", "evaluation.perfect_play", f"llm:{run}", "--json", str(out)],
            check=True,
        )
    x, o = json.loads(out.read_text())
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    return {
        "x_positions": x["positions"],
        "x_blunders": x["blunders"],
        "x_adversary_loss": x["adversary_loss"],
        "o_positions": o["positions"],
        "o_blunders": o["blunders"],
        "o_adversary_loss": o["adversary_loss"],
        "perfect": x["blunders"] == o["blunders"] == 0
        and x["adversary_loss"] == o["adversary_loss"] == 0,
        "examples": x["examples"] + o["examples"],
        "all_position_blunders": last.get(
            "blunders"
        ),  # the last step's starting policy, 4,520 positions
        "minutes": last["minutes"],
        "steps": last["step"],
        "eval": read_eval(run),  # the curves, so the figure outlives the run folder
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(30, 40)))
    ap.add_argument("--out", default="runs/tictactoe_full_width", help="folder of the runs")
    ap.add_argument("--json", default="docs/figures/tictactoe_full_width.json")
    ap.add_argument("--png", default="docs/figures/tictactoe_full_width.png")
    args = ap.parse_args()
    path = Path(args.json)
    rows = json.loads(path.read_text()) if path.is_file() else []
    done = {r["seed"] for r in rows}
    for seed in args.seeds:
        if seed in done:
            continue
        run = Path(args.out) / f"seed{seed}"
        if not finished(run):
            resume = ["--resume"] if (run / "checkpoints").is_dir() else []
            subprocess.run(
                [sys.executable, "-m", "cli.main", "train", CONFIG, "--set", f"seed={seed}"]
                + ["--out", str(run), *resume],
                check=True,
            )
        rows.append({"seed": seed, "run": str(run), **score(run)})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1) + "\n")
        r = rows[-1]
        print(
            f"seed {seed}: X {r['x_blunders']}/{r['x_positions']}, O {r['o_blunders']}/{r['o_positions']} "
            f"blunders; loses to perfect play X {r['x_adversary_loss']:.2f} O {r['o_adversary_loss']:.2f}; "
            f"{'perfect' if r['perfect'] else 'not perfect'}; {r['minutes']:.1f} min"
        )
    print(f"perfect play: {sum(r['perfect'] for r in rows)} of {len(rows)} seeds")
    plot_sweep(rows, args.png)  # legend: "seed S"


if __name__ == "__main__":
    main()
