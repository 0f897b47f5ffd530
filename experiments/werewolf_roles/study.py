"""Werewolf with one adapter per role: does each trained side beat the instruct model's?

    python -m experiments.werewolf_roles.study --seeds 21 22 23 --runs runs/werewolf_roles \
        --json docs/figures/werewolf_roles.json

For every seed, `arena train experiments/werewolf_roles/train_werewolf_roles_smollm2.yaml --set
seed=S --out RUNS/S --resume` and each `--set KEY=VALUE` given (a finished run, or one whose
`max_minutes` is spent, returns at once), then `--deals` deals of 5-player werewolf (seeds drawn
from `--eval-seed`), each played three times with the same deal:

    village   the run's village adapter in every village seat (seer, doctor, villagers), the
              instruct model in the werewolf's seat
    wolves    the run's wolves adapter in the werewolf's seat, the instruct model elsewhere
    base      the instruct model in every seat

so that the trained village's wins are paired deal by deal with the base village's against the
same base werewolf, and the trained wolves' with the base wolves' against the same base village
(the difference's 95% interval: `evaluation.stats.paired_bootstrap` over deals). Every agent
samples at temperature 1.0 with the training's prompt (`AGENT`), so a deal fixes the roles and
seats, not the play. Also per arm: the village's day votes on the werewolf
(`evaluation.werewolf.seat_facts`) and the share of the seer's findings told in a message.

Writes one row per seed to `--json` (with the run's mean training reward by step), prints a line
per seed and draws `--png`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import games
from agents import make_agent
from arena.runner import MatchPlan, play
from core.progress import Progress
from evaluation.social import replay
from evaluation.stats import paired_bootstrap, wilson
from evaluation.suites import match_seed
from evaluation.werewolf import seat_facts
from experiments.seed_study import extend_rows, study_parser, train_run
from games.werewolf import VILLAGE, WOLVES

CONFIG = "experiments/werewolf_roles/train_werewolf_roles_smollm2.yaml"
GAME, PARAMS = "werewolf", {"num_players": 5, "max_days": 2, "max_message_chars": 120}
AGENT = (
    "constrained=true,prompt=state,temperature=1.0,max_new_tokens=32,max_retries=0,fallback=random"
)
ARMS = ("village", "wolves", "base")  # which side plays the run's adapter ("base": neither)


def seating(arm: str, seed: int) -> list[str]:
    """The agents of the deal `seed`'s seats in `arm`: the adapter on its own side, "base" else."""
    wolves, village = games.declared_teams(GAME, PARAMS, seed)
    side = {"village": village, "wolves": wolves, "base": ()}[arm]
    return [arm if s in side else "base" for s in range(PARAMS["num_players"])]


def deal_plans(deals: int, eval_seed: int) -> list[MatchPlan]:
    """Every arm of every deal: match `ARM|d`, the deal's seed the same in the three arms."""
    out = []
    for d in range(deals):
        seed = match_seed(eval_seed, f"{GAME}|{d}")
        out += [MatchPlan(f"{a}|{d:04d}", GAME, seating(a, seed), seed, dict(PARAMS)) for a in ARMS]
    return out


def match_row(rec) -> dict:
    """A played match in figures: who won, the village's day votes, the seer's findings."""
    env = replay(rec)
    facts = [seat_facts(env, s) for s in env.possible_agents]
    seer = [f for f in facts if f.role == "seer"]
    return {
        "village_won": env.winner == VILLAGE,
        "wolves_won": env.winner == WOLVES,
        "village_votes": facts[0].village_votes,
        "village_on_wolves": facts[0].village_on_wolves,
        "found": sum(f.found for f in seer),
        "told": sum(f.told for f in seer),
    }


def arm_summary(rows: list[dict]) -> dict:
    """An arm's means over its deals."""
    n = len(rows)
    vw, ww = sum(r["village_won"] for r in rows), sum(r["wolves_won"] for r in rows)
    votes, found = sum(r["village_votes"] for r in rows), sum(r["found"] for r in rows)
    return {
        "village_win": vw / n,
        "village_win_ci": list(wilson(vw, n)),
        "wolves_win": ww / n,
        "wolves_win_ci": list(wilson(ww, n)),
        "village_on_wolves": sum(r["village_on_wolves"] for r in rows) / votes if votes else None,
        "findings": found,
        "told": sum(r["told"] for r in rows) / found if found else None,
    }


def paired_wins(trained: list[dict], base: list[dict], side: str) -> dict:
    """`side`'s wins, trained arm minus base arm, deal by deal: mean and bootstrap 95% CI."""
    key = f"{side}_won"
    d = paired_bootstrap([float(a[key]) - float(b[key]) for a, b in zip(trained, base)])
    return {"mean": d.mean, "ci": [d.low, d.high], "deals": d.n}


def training_rewards(run: Path) -> list[float]:
    """The run's mean training reward a seat, step by step (`metrics.jsonl`)."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["reward"] for r in rows if "reward" in r]


def play_arms(agents: dict, deals: int, eval_seed: int) -> dict[str, list[dict]]:
    """Every arm's matches over the same deals (`agents`: an agent per name of `ARMS`), in
    deal order: arm -> a `match_row` per deal."""
    by_arm: dict[str, list[dict]] = {a: [] for a in ARMS}
    plans = deal_plans(deals, eval_seed)
    with Progress(total=len(plans), desc="werewolf arms") as bar:
        records = list(play(plans, agents, concurrency=16, progress=bar))
    for rec in sorted(records, key=lambda r: r.match_id):
        by_arm[rec.match_id.split("|")[0]].append(match_row(rec))
    return by_arm


def score_seed(
    seed: int, runs: Path, deals: int, eval_seed: int, overrides: list[str] | None = None
) -> dict:
    """The row of one seed: its run trained (the config with `overrides`, each `KEY=VALUE`),
    then the three arms over the same deals."""
    extra = [a for kv in overrides or [] for a in ("--set", kv)]
    run = train_run(CONFIG, seed, runs / str(seed), extra)
    agents = {
        "base": make_agent(f"llm:smollm2-135m,{AGENT}"),
        "village": make_agent(f"llm:{run}#village,{AGENT}"),
        "wolves": make_agent(f"llm:{run}#wolves,{AGENT}"),
    }
    by_arm = play_arms(agents, deals, eval_seed)
    rewards = training_rewards(run)
    return {
        "seed": seed,
        "deals": deals,
        "eval_seed": eval_seed,
        "steps": len(rewards),
        "training_reward": rewards,
        **{arm: arm_summary(rows) for arm, rows in by_arm.items()},
        "village_gain": paired_wins(by_arm["village"], by_arm["base"], "village"),
        "wolves_gain": paired_wins(by_arm["wolves"], by_arm["base"], "wolves"),
    }


def line(r: dict) -> str:
    """One seed's result in a line."""
    v, w = r["village_gain"], r["wolves_gain"]
    return (
        f"seed {r['seed']} ({r['steps']} steps): village wins, trained {r['village']['village_win']:.2f}"
        f" base {r['base']['village_win']:.2f} (paired {v['mean']:+.2f} [{v['ci'][0]:+.2f}, "
        f"{v['ci'][1]:+.2f}]); wolves wins, trained {r['wolves']['wolves_win']:.2f} base "
        f"{r['base']['wolves_win']:.2f} (paired {w['mean']:+.2f} [{w['ci'][0]:+.2f}, {w['ci'][1]:+.2f}])"
    )


def figure(rows: list[dict], path: Path) -> None:
    """Each side's wins, trained minus base with its paired CI, per seed; the training rewards."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(8.5, 3.2))
    for k, side in enumerate(("village", "wolves")):
        d = [r[f"{side}_gain"] for r in rows]
        err = [[m["mean"] - m["ci"][0] for m in d], [m["ci"][1] - m["mean"] for m in d]]
        ax.errorbar(
            x + (k - 0.5) * 0.2, [m["mean"] for m in d], yerr=err, fmt="o", capsize=4, label=side
        )
    ax.axhline(0, color="gray", lw=1)
    ax.set(xticks=x, xticklabels=[r["seed"] for r in rows], xlabel="seed")
    ax.set(ylabel="wins, trained - base (paired 95% CI)", ylim=(-1, 1))
    ax.legend(fontsize=8)
    for r in rows:
        bx.plot(
            range(1, r["steps"] + 1), r["training_reward"], marker=".", label=f"seed {r['seed']}"
        )
    bx.axhline(0, color="gray", lw=1)
    bx.set(xlabel="step", ylabel="mean training reward a seat")
    bx.legend(fontsize=8)
    fig.suptitle(
        "Werewolf, one SmolLM2 adapter per role: each side against the instruct model", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = study_parser(
        __doc__, [21, 22, 23], "runs/werewolf_roles", "docs/figures/werewolf_roles.json"
    )
    ap.add_argument("--deals", type=int, default=24, help="deals, each played in the three arms")
    ap.add_argument("--eval-seed", type=int, default=31, help="the deals' seeds derive from it")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training config override, passed to `arena train --set` (repeatable)",
    )
    args = ap.parse_args(argv)
    rows = extend_rows(
        args.json,
        args.seeds,
        lambda seed: score_seed(seed, args.runs, args.deals, args.eval_seed, args.overrides),
        lambda row: print(line(row), flush=True),
    )
    if rows:
        figure(rows, args.png or args.json.with_suffix(".png"))
    return rows


if __name__ == "__main__":
    main()
