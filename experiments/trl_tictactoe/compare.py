"""TRL's GRPOTrainer through the OpenEnv environment against `arena train`, side by side.

    python experiments/trl_tictactoe/compare.py --seed 80 --out runs/trl_vs_arena \
        --json docs/figures/trl_vs_arena.json --png docs/figures/trl_vs_arena.png

Both train a tiny Llama from scratch on tic-tac-toe (relative board) against `random`, 32
matches a step (TRL: 4 match seeds x 8 games), the reply held to the legal moves, the prompt
the state text, learning rate 3e-4 (the arena config's), one thread each,
started together: `experiments/trl_tictactoe/grpo.py` (TRL) and `arena train
experiments/trl_tictactoe/arena_train.yaml` (its periodic evaluation: 200 greedy games against
random every 5 steps, counted in its wall time). Then TRL's final model plays the same
evaluation through `arena eval` (200 greedy games). The claim compares wall times: the first
arena evaluation at or above TRL's final non-losing rate, against TRL's whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from core.records import read_json_lines, read_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from machine_limit import run_facts  # noqa: E402

HERE = Path(__file__).resolve().parent
MODEL = "tiny-llama:hidden=128:heads=8"
AGENT = "constrained=true,prompt=state,system_prompt=Tic-tac-toe.,temperature=0"


def launch(cmd: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def train_both(args, out: Path) -> dict[str, float]:
    """Both runs, side by side; their wall times in minutes."""
    trl = [sys.executable, str(HERE / "grpo.py"), "--model", MODEL, "--steps", str(args.trl_steps),
           "--games", "32", "--generations", "8", "--lr", "3e-4", "--seed", str(args.seed), "--out", str(out / "trl")]  # fmt: skip
    arena = [sys.executable, "-m", "cli.main", "train", str(HERE / "arena_train.yaml"),
             "--set", f"seed={args.seed}", "--set", f"steps={args.arena_steps}", "--out", str(out / "arena")]  # fmt: skip
    start = time.perf_counter()
    procs = {"trl": launch(trl, out / "trl.log"), "arena": launch(arena, out / "arena.log")}
    minutes = {}
    while procs:
        for name, p in list(procs.items()):
            if p.poll() is not None:
                if p.returncode:
                    raise SystemExit(f"{name} failed (exit {p.returncode}): see {out / name}.log")
                minutes[name] = (time.perf_counter() - start) / 60
                del procs[name]
        time.sleep(1)
    return minutes


def trl_final(out: Path, matches: int) -> float:
    """TRL's final model: its non-losing rate against random over `matches` greedy games."""
    ev = out / "trl_eval"
    subprocess.run([sys.executable, "-m", "cli.main", "eval", "--agent", f"llm:{out / 'trl' / 'model'},{AGENT}",
                    "--games", "tic_tac_toe", "--param", "board=relative", "--opponents", "random",
                    "--matches", str(matches), "--out", str(ev)], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    rows = json.loads((ev / "eval.json").read_text())
    return next(r for r in rows if r["kind"] == "cell" and r["seat"] == "all")["non_losing"]


def trl_games(out: Path) -> list[dict]:
    """TRL's training games per step of 32: their non-losing rate and when the step ended."""
    recs = list(read_jsonl(out / "trl" / "episodes.jsonl"))
    t0 = recs[0].started_at or recs[0].finished_at
    rows = []
    for i in range(0, len(recs) - 31, 32):
        step = recs[i : i + 32]
        lost = sum(
            r.outcome[next(a for a, n in r.seats.items() if n == "trl")] == "loss" for r in step
        )
        rows.append({"step": i // 32 + 1, "non_losing": 1 - lost / 32,
                     "minutes": (step[-1].finished_at - t0) / 60})  # fmt: skip
    return rows


def arena_curve(out: Path) -> list[dict]:
    """`arena train`'s evaluation points (`eval.jsonl`: the run's wall minutes at each)."""
    return [
        {"step": r["step"], "non_losing": r["non_losing"], "minutes": r["minutes"]}
        for r in read_json_lines(out / "arena" / "eval.jsonl")
        if r.get("split") == "train" and r.get("non_losing") is not None
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=80)
    p.add_argument("--trl-steps", type=int, default=40)
    p.add_argument("--arena-steps", type=int, default=40)
    p.add_argument("--matches", type=int, default=200, help="evaluation games of TRL's model")
    p.add_argument("--out", default="runs/trl_vs_arena")
    p.add_argument("--json", default=None)
    p.add_argument("--png", default=None)
    args = p.parse_args(argv)
    out = Path(args.out) / str(args.seed)
    out.mkdir(parents=True, exist_ok=True)
    minutes = train_both(args, out)
    final = trl_final(out, args.matches)
    curve = arena_curve(out)
    reached = next((c for c in curve if c["non_losing"] >= final), None)
    row = {
        "seed": args.seed,
        "trl": {"minutes": minutes["trl"], "steps": args.trl_steps, "final_non_losing": final,
                "training_games": trl_games(out)},
        "arena": {"minutes": minutes["arena"], "steps": args.arena_steps, "eval": curve,
                  "reached": reached},
        "ratio": (reached["minutes"] / minutes["trl"]) if reached else None,
        **run_facts(),
    }  # fmt: skip
    print(json.dumps({k: row[k] for k in ("seed", "ratio")}, indent=1))
    print(f"TRL: {minutes['trl']:.1f} min, final non-losing {final:.3f}; arena: {minutes['arena']:.1f} min, "
          f"reached it at {reached and round(reached['minutes'], 2)} min (step {reached and reached['step']})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n")
    if args.png:
        plot(row, args.png)


def plot(row: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    a = row["arena"]["eval"]
    ax.plot(
        [c["minutes"] for c in a],
        [c["non_losing"] for c in a],
        "o-",
        label="arena train (greedy eval, 200 games)",
    )
    t = row["trl"]["training_games"]
    ax.plot(
        [c["minutes"] for c in t],
        [c["non_losing"] for c in t],
        ":",
        label="TRL GRPO (its training games, sampled)",
    )
    ax.plot(
        [row["trl"]["minutes"]],
        [row["trl"]["final_non_losing"]],
        "s",
        ms=9,
        label="TRL final (greedy eval, 200 games)",
    )
    ax.set_xlabel("wall minutes (side by side, one thread each)")
    ax.set_ylabel("non-losing rate vs random")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
