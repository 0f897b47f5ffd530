"""Four-player public goods: N-player Advantage Alignment against MARS, and what a defector gains.

    python -m experiments.public_goods.study --seeds 80 81 82 83 84 --runs runs/pg \
        --json docs/figures/public_goods_aa.json
    python -m experiments.public_goods.study --setting fitted --seeds 80 81 82 83 84 \
        --runs runs/pg_fitted --json docs/figures/public_goods_aa_fitted.json
    python -m experiments.public_goods.study --setting summed-100 --seeds 80 81 82 83 84 \
        --runs runs/pg_summed --json docs/figures/public_goods_aa_summed.json
    python -m experiments.public_goods.study --setting summed --seeds 90 91 92 93 94 \
        --runs runs/pg_summed200 --json docs/figures/public_goods_aa_summed200.json

For every seed, `arena train configs/train_public_goods_{aa,mars}.yaml --set seed=S --out
RUNS/{aa,mars}-S --resume` (a finished run returns at once), then each final policy plays
`--matches` matches per table, the same match seeds for every policy (paired). With `--setting
fitted` the configs are `configs/train_public_goods_{aa,mars}_fitted.yaml` (all-or-nothing
contributions, a memory-1 prompt) and both arms start from one fit to tit-for-tat per seed,
made first (`RUNS/start-S`, the tiny model initialised for the seed and fitted by cross-entropy
to tit-for-tat's moves from every seat); the start is scored beside them. With `--setting
summed` they are `configs/train_public_goods_{aa,mars}_summed.yaml`: all-or-nothing
contributions, a memory-1 prompt giving the others' contributions as one sum, pure self-play,
from scratch (200 steps, the probability floor over the first 100); `--setting summed-100` runs
the same configs for 100 steps with the floor over the first 60 (`OVERRIDES`).

    self-play      the policy in all four seats: its contribution (share of the endowment put
                   in, per round), welfare (the seats' total return as a share of everyone
                   contributing everything: 640 points with the defaults) and the Gini index
                   of the four returns
    one defector   `always_defect` in one seat (rotating with the match) and the policy in the
                   other three; the same table with `tit_for_tat` (contributes while every
                   other player did) in the policy's place. Exploitation: the defector's return
                   minus the mean return of the seats it plays against.
    profile        the policy's exact probability of giving everything in round two after
                   each last round (`state_profile`), where its agent has exact distributions

Writes one row per seed to `--json` (means, and the paired differences AA - MARS and
AA - tit-for-tat with their t 95% CIs over the matches; each arm's `precision`, as it trained) and
prints a table.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import numpy as np

import games
from agents import make_agent
from agents.checkpoint import latest_precision
from arena.runner import MatchPlan, play
from evaluation.social import gini
from evaluation.stats import mean_ci
from experiments.seed_study import extend_rows, train_run
from training.config import load_config

GAME, SEATS = "public_goods", 4
SETTINGS = {  # setting -> arm -> config
    "scratch": {
        "aa": "configs/train_public_goods_aa.yaml",
        "mars": "configs/train_public_goods_mars.yaml",
    },
    "fitted": {
        "aa": "configs/train_public_goods_aa_fitted.yaml",
        "mars": "configs/train_public_goods_mars_fitted.yaml",
    },
    "summed": {
        "aa": "configs/train_public_goods_aa_summed.yaml",
        "mars": "configs/train_public_goods_mars_summed.yaml",
    },
}
SETTINGS["summed-100"] = SETTINGS["summed"]  # the same configs, run shorter (`OVERRIDES`)
OVERRIDES = {  # setting -> what its runs change in the configs
    "summed-100": ["--set", "steps=100", "--set", "learner.loss.floor_decay_steps=120"],
}


def game_params(config: str) -> dict:
    """The config's public goods parameters (its first game's)."""
    return dict(load_config(config).games[0].params)


def fitted_start(config: str, seed: int, runs: Path) -> Path:
    """`RUNS/start-S`: the config's model initialised for `seed`, fitted to tit-for-tat's moves
    from every seat (80 steps; `supervised_tit_for_tat`); made once, kept."""
    from experiments.reciprocity.reciprocity_study import supervised_tit_for_tat

    start = runs / f"start-{seed}"
    if not (start / "config.json").is_file():
        supervised_tit_for_tat(config, steps=80, every=80, seed=seed, save=start, every_seat=True)
    return start


def train(arm: str, seed: int, runs: Path, setting: str = "scratch") -> Path:
    """The arm's run for `seed`, trained to its end (`train_run`); in the `fitted` setting from
    the seed's fitted start."""
    config = SETTINGS[setting][arm]
    extra = ["--set", f"model={fitted_start(config, seed, runs)}"] if setting == "fitted" else []
    return train_run(config, seed, runs / f"{arm}-{seed}", extra + OVERRIDES.get(setting, []))


def table(
    seats: list[str], agents: dict, matches: int, rotate: str | None, params: dict | None = None
) -> list:
    """`matches` matches of the seating (the `rotate` agent's seat moves with the match)."""
    plans = []
    for m in range(matches):
        order = list(seats)
        if rotate is not None:
            order.remove(rotate)
            order.insert(m % SEATS, rotate)
        plans.append(MatchPlan(f"m{m}", GAME, order, seed=1000 + m, params=params or {}))
    return list(play(plans, agents, concurrency=matches))


def self_play(name: str, agent, matches: int, params: dict | None = None) -> dict[str, list[float]]:
    """Per match: mean contribution share, welfare share, Gini of the returns."""
    env = games.make(GAME, **(params or {}))
    out = {"contribution": [], "welfare": [], "gini": []}
    for rec in table([name] * SEATS, {name: agent}, matches, None, params):
        moves = [int(t.action) for t in rec.turns if t.agent == name]
        r = np.array(list(rec.returns.values()))
        optimum = len(moves) * env.endowment * env.multiplier  # everyone giving every round
        out["contribution"].append(float(np.mean(moves)) / env.endowment)
        out["welfare"].append(float(r.sum()) / optimum)
        out["gini"].append(gini(list(r)))
    return out


def exploitation(
    name: str, agent, defector, matches: int, params: dict | None = None
) -> list[float]:
    """Per match: the defector's return minus the mean return of the three other seats."""
    seats = ["defector"] + [name] * (SEATS - 1)
    gaps = []
    for rec in table(seats, {name: agent, "defector": defector}, matches, "defector", params):
        by_seat = {p: rec.returns[p] for p in rec.returns}
        d = [p for p, who in rec.seats.items() if who == "defector"][0]
        gaps.append(by_seat[d] - np.mean([v for p, v in by_seat.items() if p != d]))
    return gaps


def state_profile(agent, params: dict | None = None) -> dict[str, float]:
    """The policy's probability of putting in its whole endowment at the start of round two,
    after each last round it could have seen, averaged over the four seats: `first` (round
    one), `gave-K` / `kept-K` (it gave everything or nothing, K of the others gave everything,
    the rest nothing). Exact move distributions (`action_probabilities`); {} for an agent
    without them. Tit-for-tat: 1 at `first`, `gave-3` and `kept-3`, 0 elsewhere."""
    from agents.base import PendingTurn

    labels, turns = [], []
    for seat in range(SEATS):
        for label, mine, k in [("first", None, 0)] + [
            (f"{'gave' if m else 'kept'}-{k}", m, k) for m in (1, 0) for k in range(SEATS)
        ]:
            env = games.make(GAME, **(params or {}))
            env.reset(seed=0)
            if mine is not None:
                others = iter([env.endowment] * k + [0] * (SEATS - 1 - k))
                for p in range(SEATS):
                    env.step(mine * env.endowment if p == seat else next(others))
            for _ in range(seat):  # the seats before it have moved this round
                env.step(0)
            labels.append(label)
            turns.append(PendingTurn("profile", env, env.agent_selection, np.random.default_rng(0)))
    probs = agent.action_probabilities(turns) if hasattr(agent, "action_probabilities") else None
    if probs is None:
        return {}
    by_label: dict[str, list[float]] = {}
    for label, turn, pr in zip(labels, turns, probs):
        by_label.setdefault(label, []).append(float(pr.get(turn.env.endowment, 0.0)))
    return {label: float(np.mean(v)) for label, v in by_label.items()}


def paired(a: list[float], b: list[float]) -> dict:
    mean, lo, hi = mean_ci([x - y for x, y in zip(a, b)])
    return {"mean": mean, "ci": [lo, hi]}


def score_seed(seed: int, runs: Path, matches: int, setting: str = "scratch") -> dict:
    """Train both arms for `seed` (`train`) and score them, and in the `fitted` setting their
    start, in self-play and beside a defector; tit-for-tat beside the same defector."""
    trained = {arm: train(arm, seed, runs, setting) for arm in SETTINGS[setting]}
    policies = {arm: make_agent(f"llm:{run}") for arm, run in trained.items()}
    if setting == "fitted":
        agent = asdict(load_config(SETTINGS[setting]["aa"]).agent)  # as the runs play
        policies["start"] = make_agent(
            {"type": "llm", "model": str(runs / f"start-{seed}"), **agent}
        )
    params = game_params(SETTINGS[setting]["aa"])
    defector, tft = make_agent("always_defect"), make_agent("tit_for_tat")
    social = {arm: self_play(arm, a, matches, params) for arm, a in policies.items()}
    gaps = {arm: exploitation(arm, a, defector, matches, params) for arm, a in policies.items()}
    gaps["tit_for_tat"] = exploitation("tit_for_tat", tft, defector, matches, params)
    row = {"seed": seed, "setting": setting, "params": params, "matches": matches}
    for arm, s in social.items():
        row[arm] = {k: float(np.mean(v)) for k, v in s.items()} | {
            "exploited": float(np.mean(gaps[arm]))
        }
        row[arm]["profile"] = state_profile(policies[arm], params)
        if arm in trained:
            row[arm]["precision"] = latest_precision(trained[arm] / "checkpoints")
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
    ap.add_argument(
        "--setting",
        choices=sorted(SETTINGS),
        default="scratch",
        help="scratch: both arms from a fresh model (configs/train_public_goods_{aa,mars}.yaml); "
        "fitted: all-or-nothing contributions, both arms from a fit to tit-for-tat; "
        "summed: all-or-nothing, the others' contributions summed in the prompt, from scratch; "
        "summed-100: the same, 100 steps with the floor over the first 60",
    )
    args = ap.parse_args()
    extend_rows(
        args.json,
        args.seeds,
        lambda seed: score_seed(seed, args.runs, args.matches, args.setting),
        report,
    )


def report(r: dict) -> None:
    """One seed's row in lines: AA - MARS, how exploitable each is, the fitted start."""
    c, w, e = (
        r["aa_minus_mars"]["contribution"],
        r["aa_minus_mars"]["welfare"],
        r["aa_minus_tft_exploited"],
    )
    print(
        f"seed {r['seed']}: contribution aa {r['aa']['contribution']:.3f} mars {r['mars']['contribution']:.3f} "
        f"(diff {c['mean']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]); welfare diff {w['mean']:+.3f} "
        f"[{w['ci'][0]:+.3f}, {w['ci'][1]:+.3f}]; exploited aa {r['aa']['exploited']:.1f} "
        f"tft {r['tit_for_tat']['exploited']:.1f} (diff {e['mean']:+.1f} [{e['ci'][0]:+.1f}, {e['ci'][1]:+.1f}])"
    )
    for arm in ("aa", "mars"):
        if r[arm].get("profile"):
            states = ", ".join(f"{k} {v:.2f}" for k, v in r[arm]["profile"].items())
            print(f"  {arm} p(give everything): {states}")
    if "start" in r:
        print(
            f"  the fitted start: contribution {r['start']['contribution']:.3f}, "
            f"exploited {r['start']['exploited']:.2f}"
        )


if __name__ == "__main__":
    main()
