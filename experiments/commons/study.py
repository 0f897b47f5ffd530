"""Four-player commons: does N-player Advantage Alignment keep the lake alive longer than MARS?

    python -m experiments.commons.study --seeds 80 81 82 --runs runs/commons \
        --json docs/figures/commons_aa.json

For every seed, `arena train experiments/commons/train_commons_{aa,mars}.yaml --set seed=S --out
RUNS/{aa,mars}-S --resume` (a finished run returns at once), then each final policy plays
`--matches` self-play matches (the policy in all four seats, at its training temperature), the
same match seeds for both arms, so match k of one arm is paired with match k of the other:

    rounds          rounds played before the stock collapsed (12: it never did), the
                    collapse round counted (`evaluation.commons.match_facts`)
    collapsed       share of matches in which the stock collapsed
    harvest_share   the four catches together as a share of the sustainable optimum (375
                    tons: the most any schedule of catches takes over 12 rounds)
    gini            the Gini index of the four catches

Writes one row per seed to `--json` (each arm's means, and AA - MARS in rounds and harvest
share paired match by match with its t 95% CI), prints a line per seed and draws `--png`
(rounds per seed and arm, and the paired difference with its CI).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents import make_agent
from arena.runner import MatchPlan, play
from evaluation.commons import match_facts
from evaluation.stats import mean_ci
from experiments.seed_study import extend_rows, study_parser, train_run

GAME, SEATS, PARAMS = "commons", 4, {"discussion": False}
ARMS = {
    "aa": "experiments/commons/train_commons_aa.yaml",
    "mars": "experiments/commons/train_commons_mars.yaml",
}
MEASURES = ("rounds", "collapsed", "harvest_share", "gini")


def train(arm: str, seed: int, runs: Path) -> Path:
    """The arm's run for `seed`, trained to its end (resumed when it was cut)."""
    return train_run(ARMS[arm], seed, runs / f"{arm}-{seed}")


def self_play(name: str, agent, matches: int) -> dict[str, list[float]]:
    """Per self-play match (seeds 1000, 1001, ...: the same for every policy): the measures."""
    plans = [
        MatchPlan(f"m{m:04d}", GAME, [name] * SEATS, seed=1000 + m, params=dict(PARAMS))
        for m in range(matches)
    ]
    records = sorted(play(plans, {name: agent}, concurrency=matches), key=lambda r: r.match_id)
    facts = [match_facts(rec, name) for rec in records]
    return {k: [float(getattr(f, k)) for f in facts] for k in MEASURES}


def paired(a: list[float], b: list[float]) -> dict:
    """a - b match by match: the mean and its t 95% CI over matches."""
    mean, lo, hi = mean_ci([x - y for x, y in zip(a, b)])
    return {"mean": mean, "ci": [lo, hi]}


def score_seed(seed: int, runs: Path, matches: int) -> dict:
    """The row of one seed: each arm's self-play means and AA - MARS paired."""
    measured = {
        arm: self_play(arm, make_agent(f"llm:{train(arm, seed, runs)}"), matches) for arm in ARMS
    }
    row = {"seed": seed, "matches": matches}
    for arm, m in measured.items():
        row[arm] = {k: float(np.mean(v)) for k, v in m.items()}
    row["aa_minus_mars"] = {
        k: paired(measured["aa"][k], measured["mars"][k]) for k in ("rounds", "harvest_share")
    }
    return row


def line(r: dict) -> str:
    """One seed's result in a line."""
    d = r["aa_minus_mars"]["rounds"]
    return (
        f"seed {r['seed']}: rounds aa {r['aa']['rounds']:.2f} mars {r['mars']['rounds']:.2f} "
        f"(diff {d['mean']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]); collapsed aa "
        f"{r['aa']['collapsed']:.2f} mars {r['mars']['collapsed']:.2f}; harvest share aa "
        f"{r['aa']['harvest_share']:.3f} mars {r['mars']['harvest_share']:.3f}"
    )


def figure(rows: list[dict], path: Path) -> None:
    """Rounds the lake lasted per seed and arm, and AA - MARS with its paired CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = [r["seed"] for r in rows]
    x = np.arange(len(rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(8, 3.2))
    for k, arm in enumerate(ARMS):
        ax.bar(x + (k - 0.5) * 0.4, [r[arm]["rounds"] for r in rows], 0.4, label=arm)
    ax.set(xticks=x, xticklabels=seeds, xlabel="seed", ylabel="rounds (of 12)", ylim=(0, 12))
    ax.legend(fontsize=8)
    d = [r["aa_minus_mars"]["rounds"] for r in rows]
    err = [[m["mean"] - m["ci"][0] for m in d], [m["ci"][1] - m["mean"] for m in d]]
    bx.errorbar(x, [m["mean"] for m in d], yerr=err, fmt="o", capsize=4)
    bx.axhline(0, color="gray", lw=1)
    bx.set(xticks=x, xticklabels=seeds, xlabel="seed", ylabel="rounds, AA - MARS (paired 95% CI)")
    fig.suptitle("Four-player commons: self-play rounds before the lake collapses", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = study_parser(__doc__, [80, 81, 82], "runs/commons", "docs/figures/commons_aa.json")
    ap.add_argument("--matches", type=int, default=64, help="self-play matches per policy")
    args = ap.parse_args(argv)
    rows = extend_rows(
        args.json,
        args.seeds,
        lambda seed: score_seed(seed, args.runs, args.matches),
        lambda row: print(line(row), flush=True),
    )
    if rows:
        figure(rows, args.png or args.json.with_suffix(".png"))
    return rows


if __name__ == "__main__":
    main()
