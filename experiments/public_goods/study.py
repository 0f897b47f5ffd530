"""Four-player public goods: N-player Advantage Alignment against MARS, and what a defector gains.

    python -m experiments.public_goods.study --seeds 80 81 82 83 84 --runs runs/pg \
        --json docs/figures/public_goods_aa.json

For every seed, `arena train configs/train_public_goods_{aa,mars}.yaml --set seed=S --out
RUNS/{aa,mars}-S --resume` (a finished run returns at once), then each final policy plays
`--matches` matches per table, the same match seeds for every policy (paired):

    self-play      the policy in all four seats: its contribution (share of the endowment put
                   in, per round), welfare (the seats' total return as a share of everyone
                   contributing everything: 640 points) and the Gini index of the four returns
    one defector   `always_defect` in one seat (rotating with the match) and the policy in the
                   other three; the same table with `tit_for_tat` (contributes while every
                   other player did) in the policy's place. Exploitation: the defector's return
                   minus the mean return of the seats it plays against.

Writes one row per seed to `--json` (means, and the paired differences AA - MARS and
AA - tit-for-tat with their t 95% CIs over the matches) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from agents import make_agent
from arena.runner import MatchPlan, play
from evaluation.stats import mean_ci

GAME, SEATS, OPTIMUM = "public_goods", 4, 4 * 10 * 10 * 1.6  # defaults: endowment 10, 10 rounds
ARMS = {"aa": "configs/train_public_goods_aa.yaml", "mars": "configs/train_public_goods_mars.yaml"}


def train(arm: str, seed: int, runs: Path) -> Path:
    """The arm's run for `seed`, trained to its end (`train_run`)."""
    return train_run(ARMS[arm], seed, runs / f"{arm}-{seed}")


def train_run(config: str, seed: int, run: Path) -> Path:
    """`arena train CONFIG --set seed=S --out RUN --resume`: a finished run returns at once, a
    killed one goes on from its last checkpoint."""
    cmd = ["train", config, "--set", f"seed={seed}", "--out", str(run), "--resume"]
    subprocess.run([sys.executable, "-m", "cli.main", *cmd], check=True)
    return run


def table(seats: list[str], agents: dict, matches: int, rotate: str | None) -> list:
    """`matches` matches of the seating (the `rotate` agent's seat moves with the match)."""
    plans = []
    for m in range(matches):
        order = list(seats)
        if rotate is not None:
            order.remove(rotate)
            order.insert(m % SEATS, rotate)
        plans.append(MatchPlan(f"m{m}", GAME, order, seed=1000 + m))
    return list(play(plans, agents, concurrency=matches))


def self_play(name: str, agent, matches: int) -> dict[str, list[float]]:
    """Per match: mean contribution share, welfare share, Gini of the returns."""
    out = {"contribution": [], "welfare": [], "gini": []}
    for rec in table([name] * SEATS, {name: agent}, matches, None):
        moves = [int(t.action) for t in rec.turns if t.agent == name]
        r = np.array(list(rec.returns.values()))
        out["contribution"].append(float(np.mean(moves)) / 10)
        out["welfare"].append(float(r.sum()) / OPTIMUM)
        diffs = np.abs(r[:, None] - r[None, :]).sum()
        out["gini"].append(float(diffs / (2 * len(r) ** 2 * r.mean())))
    return out


def exploitation(name: str, agent, defector, matches: int) -> list[float]:
    """Per match: the defector's return minus the mean return of the three other seats."""
    seats = ["defector"] + [name] * (SEATS - 1)
    gaps = []
    for rec in table(seats, {name: agent, "defector": defector}, matches, "defector"):
        by_seat = {p: rec.returns[p] for p in rec.returns}
        d = [p for p, who in rec.seats.items() if who == "defector"][0]
        gaps.append(by_seat[d] - np.mean([v for p, v in by_seat.items() if p != d]))
    return gaps


def paired(a: list[float], b: list[float]) -> dict:
    mean, lo, hi = mean_ci([x - y for x, y in zip(a, b)])
    return {"mean": mean, "ci": [lo, hi]}


def score_seed(seed: int, runs: Path, matches: int) -> dict:
    policies = {arm: make_agent(f"llm:{train(arm, seed, runs)}") for arm in ARMS}
    defector, tft = make_agent("always_defect"), make_agent("tit_for_tat")
    social = {arm: self_play(arm, a, matches) for arm, a in policies.items()}
    gaps = {arm: exploitation(arm, a, defector, matches) for arm, a in policies.items()}
    gaps["tit_for_tat"] = exploitation("tit_for_tat", tft, defector, matches)
    row = {"seed": seed, "matches": matches}
    for arm, s in social.items():
        row[arm] = {k: float(np.mean(v)) for k, v in s.items()} | {
            "exploited": float(np.mean(gaps[arm]))
        }
    row["tit_for_tat"] = {"exploited": float(np.mean(gaps["tit_for_tat"]))}
    row["aa_minus_mars"] = {
        k: paired(social["aa"][k], social["mars"][k]) for k in ("contribution", "welfare")
    }
    row["aa_minus_tft_exploited"] = paired(gaps["aa"], gaps["tit_for_tat"])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[80, 81, 82, 83, 84])
    ap.add_argument("--runs", type=Path, default=Path("runs/pg"))
    ap.add_argument("--matches", type=int, default=32, help="matches per table")
    ap.add_argument("--json", type=Path, default=Path("docs/figures/public_goods_aa.json"))
    args = ap.parse_args()
    rows = json.loads(args.json.read_text()) if args.json.is_file() else []
    done = {r["seed"] for r in rows}
    for seed in args.seeds:
        if seed in done:
            continue
        rows.append(score_seed(seed, args.runs, args.matches))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        r = rows[-1]
        c, w, e = (
            r["aa_minus_mars"]["contribution"],
            r["aa_minus_mars"]["welfare"],
            r["aa_minus_tft_exploited"],
        )
        print(
            f"seed {seed}: contribution aa {r['aa']['contribution']:.3f} mars {r['mars']['contribution']:.3f} "
            f"(diff {c['mean']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]); welfare diff {w['mean']:+.3f} "
            f"[{w['ci'][0]:+.3f}, {w['ci'][1]:+.3f}]; exploited aa {r['aa']['exploited']:.1f} "
            f"tft {r['tit_for_tat']['exploited']:.1f} (diff {e['mean']:+.1f} [{e['ci'][0]:+.1f}, {e['ci'][1]:+.1f}])"
        )


if __name__ == "__main__":
    main()
