"""How many matches each tournament format needs to recover a known ranking.

Simulated Bradley-Terry players: player i has strength s_i ~ Normal(0, `spread`), and in
every comparison each side draws a performance s + Gumbel(0, 1); the higher performance
wins and is the side's score. The difference of two Gumbels is logistic, so
P(i beats j) = sigmoid(s_i - s_j): exactly Bradley-Terry, with a score that says by how
much (as a judge's score does). `--outcome-only` replaces the scores by 1/0 (a game with
no margin, as a win/loss return).

Every format runs through `tournaments.judge.rank_group` (the public API), the same code that ranks a
group of trajectories in training and (through `tournaments.run`) agents in the arena.
For each N and format, over `--trials` random populations: matches used (comparisons),
Kendall tau between the format's ranking and the true order, top-1 accuracy (the
strongest player ranked first). Then the ratios to round robin.

    python bench/tournament_efficiency.py                 # N = 16, 32, 64, 200 trials
    python bench/tournament_efficiency.py --sizes 16 --trials 500 --plot runs/eff.png
    python bench/tournament_efficiency.py --targets --trials 100 --seed 1   # the adaptive format's targets
    python bench/tournament_efficiency.py --quick         # the same at N = 16, 10 trials (tests)

Formats compared (k = 1 game per pairing everywhere):
    round_robin          N(N-1)/2
    swiss                ceil(log2 N) rounds of N/2, random initial order
    se_anchor            ArenaRL: seeding vs the anchor (item 0) + N-1 bracket matches
    se_prior             seeded single elimination, seeds from prior ratings (the true
                         strength plus Normal(0, `--prior-noise`) noise: ratings from an
                         earlier tournament), N-1 matches
    se_random            single elimination with a random draw, N-1 matches
    de_anchor            double elimination after an anchor seeding phase
    anchor               everyone vs the anchor only, N-1 matches
    prior                no matches: the prior ratings se_prior is seeded with, as a
                         ranking (what se_prior's bracket adds to, or takes from, it)
    adaptive             Swiss rounds, then information-weighted rounds (`tournaments.adaptive`),
                         budget 2 N log2 N (768 at N = 64)
    adaptive_0.5rr       the same with half of round robin's matches, _0.7rr with 0.7
    adaptive_stop        with the stopping rule: every rank interval at most N/4 places
                         wide, else round robin's 0.7 as the budget

`--targets`: N = 32 and 64, spread 2, win/loss results; adaptive at 768
matches >= 0.95 of round robin's tau (2,016) with top-1 at least round robin's, at 0.7x
round robin's tau itself, at N = 32 with 0.5x >= 0.95 of it. Every format meets the same
populations, so the tau differences are paired.

Reading the numbers: the "7x fewer matches than round robin at N = 16" of ArenaRL's claim
is only reachable with N-1 = 15 matches, i.e. seeds from prior ratings: a seeding phase
against an anchor costs N-1 more (2N-2 = 30, 4x fewer than RR's 120). Compare se_prior
with `prior` before crediting the bracket. `--spread` sets how decisive one comparison
is (sd of strengths in logits; 2 ~ 350 Elo): the larger, the closer every format gets to
round robin. At the default spread 2 (500 trials): se_prior 0.835 of round robin's tau,
se_anchor 0.857 (4x fewer); the bound below shows no tie-break can lift a bracket ranked
by round out past ~0.87, nor any ranking from win/loss results past ~0.88; only an
unconstrained posterior over the scores with the true noise model reaches ~0.95.

The bound (printed by default; `--no-bound` skips it): could any final ranking of
se_prior's 15 matches meet the target? It ranks the same brackets by the Bayes posterior
mean of each strength given the prior rating and every game, with the simulation's true
noise model (an oracle: no real tournament knows it): alone ("posterior"), from win/loss
only ("posterior, win/loss"), and as the tie-break within ArenaRL's rule that ranks by the
round a player was knocked out in ("round out + posterior").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tournaments.judge import judge_group, rank_group  # noqa: E402

STOP_WIDTH = 4  # adaptive_stop: stop once every rank interval spans at most N / STOP_WIDTH places

FORMATS = {
    "round_robin": ("round_robin", {}),
    "swiss": ("swiss", {"seeding": "random"}),
    "se_anchor": ("single_elimination", {"seeding": "anchor", "anchor": 0}),
    "se_prior": ("single_elimination", {"seeding": "ratings"}),
    "se_random": ("single_elimination", {"seeding": "random"}),
    "de_anchor": ("double_elimination", {"seeding": "anchor", "anchor": 0}),
    "anchor": ("anchor", {"anchor": 0}),
    "prior": (None, {"seeding": "ratings"}),
    "adaptive": ("adaptive", {}),  # budget 2 N log2 N
    "adaptive_0.5rr": ("adaptive", {"max_matches": lambda n: n * (n - 1) // 4}),
    "adaptive_0.7rr": ("adaptive", {"max_matches": lambda n: int(0.7 * n * (n - 1) / 2)}),
    "adaptive_stop": (
        "adaptive",
        {"max_matches": lambda n: int(0.7 * n * (n - 1) / 2), "width": lambda n: n // STOP_WIDTH},
    ),
}
ADAPTIVE = [f for f, (name, _) in FORMATS.items() if name == "adaptive"]
TARGET_SIZES = [32, 64]


def bt_judge(
    strengths: np.ndarray,
    rng: np.random.Generator,
    outcome_only: bool = False,
    counter: list | None = None,
):
    """A batch compare function: performance = strength + Gumbel(0, 1) per side per game."""

    def compare(pairs):
        if counter is not None:
            counter[0] += len(pairs)
        out = []
        for a, b in pairs:
            pa, pb = strengths[a] + rng.gumbel(), strengths[b] + rng.gumbel()
            out.append((float(pa > pb), float(pb > pa)) if outcome_only else (pa, pb))
        return out

    return compare


def run_trial(
    strengths: np.ndarray,
    fmt: str,
    rng: np.random.Generator,
    prior_noise: float,
    outcome_only: bool,
) -> tuple[int, float, bool]:
    """(comparisons, Kendall tau vs the truth, top-1 correct) of one population."""
    n = len(strengths)
    name, opts = FORMATS[fmt]
    opts = {k: v(n) if callable(v) else v for k, v in opts.items()}
    if opts.get("seeding") == "ratings":
        opts["ratings"] = {
            i: float(s + rng.normal(0.0, prior_noise)) for i, s in enumerate(strengths)
        }
    if "seed" not in opts and name in (
        "swiss",
        "single_elimination",
        "double_elimination",
        "adaptive",
    ):
        opts["seed"] = int(rng.integers(2**31))
    counter = [0]
    if name is None:  # the prior alone
        prior = np.array([opts["ratings"][i] for i in range(n)])
        predicted = np.argsort(np.argsort(-prior))
    else:
        predicted = np.array(
            rank_group(n, bt_judge(strengths, rng, outcome_only, counter), name, **opts)
        )
    tau = kendalltau(-strengths, predicted).statistic
    return counter[0], float(tau), bool(predicted[int(np.argmax(strengths))] == 0)


def measure(sizes, formats, trials, spread, prior_noise, outcome_only, seed) -> dict:
    """Every format meets the same `trials` populations per N (paired: ratios to round robin
    are compared on equal draws); each format plays them with its own random stream."""
    table = {}
    for n in sizes:
        populations = np.random.default_rng([seed, n]).normal(0.0, spread, (trials, n))
        for fmt in formats:
            rng = np.random.default_rng([seed, n, list(FORMATS).index(fmt)])
            rows = [
                run_trial(strengths, fmt, rng, prior_noise, outcome_only)
                for strengths in populations
            ]
            m, tau, top1 = (np.array(x, dtype=float) for x in zip(*rows))
            table[n, fmt] = {
                "matches": m.mean(),
                "tau": tau.mean(),
                "tau_se": tau.std(ddof=1) / np.sqrt(trials),
                "top1": top1.mean(),
                "taus": tau,
                "top1s": top1,
            }
    return table


EULER_GAMMA = 0.5772156649015329  # mean of a Gumbel(0, 1)


def bound_trial(
    n: int, rng: np.random.Generator, spread: float, prior_noise: float
) -> dict[str, float]:
    """Kendall tau of oracle rankings of one prior-seeded bracket (see the module doc)."""
    from scipy.optimize import minimize

    strengths = rng.normal(0.0, spread, n)
    prior = strengths + rng.normal(0.0, prior_noise, n)
    played: list[tuple[int, int, float, float]] = []

    def compare(pairs):
        out = [(strengths[a] + rng.gumbel(), strengths[b] + rng.gumbel()) for a, b in pairs]
        played.extend((a, b, pa, pb) for (a, b), (pa, pb) in zip(pairs, out))
        return out

    outcome = judge_group(
        n,
        compare,
        "single_elimination",
        seeding="ratings",
        ratings=dict(enumerate(prior)),
        seed=int(rng.integers(2**31)),
    )
    # scored: each game's score is strength + Gumbel, a Normal-ish measurement (mean shift gamma, variance pi^2/6)
    total, games = np.zeros(n), np.zeros(n)
    for a, b, pa, pb in played:
        total[[a, b]] += (pa - EULER_GAMMA, pb - EULER_GAMMA)
        games[[a, b]] += 1
    noise_var = np.pi**2 / 6
    posterior = (prior / prior_noise**2 + total / noise_var) / (
        1 / spread**2 + 1 / prior_noise**2 + games / noise_var
    )
    # win/loss: MAP of Bradley-Terry with the prior ratings as a Gaussian prior
    win, lose = (
        np.array([a if pa > pb else b for a, b, pa, pb in played]),
        np.array([b if pa > pb else a for a, b, pa, pb in played]),
    )

    def neg_log_post(x):
        p = 1 / (1 + np.exp(-(x[win] - x[lose])))
        grad = (x - prior) / prior_noise**2
        np.add.at(grad, win, -(1 - p))
        np.add.at(grad, lose, 1 - p)
        return -np.log(p).sum() + ((x - prior) ** 2).sum() / (2 * prior_noise**2), grad

    posterior_wl = minimize(neg_log_post, prior.copy(), jac=True, method="L-BFGS-B").x
    stage = np.array(
        [
            99
            if outcome.stats[i]["eliminated"] == "champion"
            else int(outcome.stats[i]["eliminated"][1:])
            for i in range(n)
        ]
    )
    ranks = outcome.ranks()
    return {
        "se_prior as ranked": kendalltau(-strengths, [ranks[i] for i in range(n)]).statistic,
        "posterior": kendalltau(strengths, posterior).statistic,
        "posterior, win/loss": kendalltau(strengths, posterior_wl).statistic,
        "round out + posterior": kendalltau(strengths, stage * 1e3 + posterior).statistic,
    }


def print_bound(
    trials: int, spread: float, prior_noise: float, seed: int, rr_tau: float
) -> dict[str, float]:
    """Mean tau of each oracle ranking (printed with its ratio to round robin's `rr_tau`)."""
    rng = np.random.default_rng([seed, 16, 99])
    rows = [bound_trial(16, rng, spread, prior_noise) for _ in range(trials)]
    print(
        f"\nbound at N=16, spread {spread}: se_prior's 15 matches ranked by an oracle posterior ({trials} trials)"
    )
    means = {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
    for key, tau in means.items():
        print(f"  {key:<24} tau {tau:.3f}   {tau / rr_tau:.3f} x round robin")
    return means


def print_table(table: dict, sizes, formats) -> None:
    head = f"{'N':>3}  {'format':<15} {'matches':>8} {'tau':>13} {'top-1':>6}   {'matches/RR':>10} {'RR/matches':>10} {'tau/RR':>7}"
    print(head)
    print("-" * len(head))
    for n in sizes:
        rr = table.get((n, "round_robin"))
        for fmt in formats:
            r = table[n, fmt]
            ratio = ""
            if rr and r["matches"]:
                ratio = f"{r['matches'] / rr['matches']:>10.3f} {rr['matches'] / r['matches']:>9.1f}x {r['tau'] / rr['tau']:>7.3f}"
            print(
                f"{n:>3}  {fmt:<15} {r['matches']:>8.1f} {r['tau']:>7.3f}±{r['tau_se']:.3f} {r['top1']:>6.2f}   {ratio}"
            )
        print()


def print_targets(table: dict, sizes, formats) -> None:
    """The adaptive format against round robin on the same populations (paired differences)."""
    if "round_robin" not in formats or not set(ADAPTIVE) & set(formats):
        return
    print("adaptive vs round robin (same populations; +- is the s.e. of the paired difference):")
    for n in sizes:
        rr = table[n, "round_robin"]
        for fmt in (f for f in ADAPTIVE if f in formats):
            r = table[n, fmt]
            diff = r["taus"] - rr["taus"]
            line = (
                f"  N={n:<3} {fmt:<15} {r['matches']:>7.1f} matches ({r['matches'] / rr['matches']:.2f} x RR): tau {r['tau']:.3f} = "
                f"{r['tau'] / rr['tau']:.3f} x RR (diff {diff.mean():+.3f}+-{diff.std(ddof=1) / np.sqrt(len(diff)):.3f}), "
                f"top-1 {r['top1']:.2f} vs RR {rr['top1']:.2f}"
            )
            goal = {
                ("adaptive", 64): 0.95,
                ("adaptive_0.7rr", 64): 1.0,
                ("adaptive_0.5rr", 32): 0.95,
            }.get((fmt, n))
            if goal is not None:
                ok = r["tau"] >= goal * rr["tau"] and (fmt != "adaptive" or r["top1"] >= rr["top1"])
                extra = " and top-1 >= RR's" if fmt == "adaptive" else ""
                line += f"   target tau >= {goal:.2f} x RR{extra}: {'MET' if ok else 'not met'}"
            print(line)
    print()


def plot(table: dict, sizes, formats, path: str) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.6), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        for fmt in formats:
            r = table[n, fmt]
            if not r["matches"]:
                ax.axhline(r["tau"], ls=":", color="gray")
                ax.annotate(
                    f"{fmt} (0 matches)",
                    (0.01, r["tau"]),
                    xycoords=("axes fraction", "data"),
                    xytext=(0, 3),
                    textcoords="offset points",
                    fontsize=7,
                    color="gray",
                )
                continue
            ax.errorbar(r["matches"], r["tau"], yerr=1.96 * r["tau_se"], fmt="o", label=fmt)
            ax.annotate(
                fmt, (r["matches"], r["tau"]), textcoords="offset points", xytext=(4, 4), fontsize=7
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("matches used")
        ax.set_ylabel("Kendall tau vs truth")
        ax.set_title(f"N = {n}")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument(
        "--formats",
        nargs="+",
        default=[f for f in FORMATS if f not in ADAPTIVE],
        choices=list(FORMATS),
        help="default: every format but the adaptive budgets (--targets runs those)",
    )
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--spread", type=float, default=2.0, help="sd of the true strengths (logits)")
    ap.add_argument(
        "--prior-noise", type=float, default=1.0, help="sd of the noise on se_prior's prior ratings"
    )
    ap.add_argument("--outcome-only", action="store_true", help="scores are 1/0 (no margin)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", help="save a matches-vs-tau figure here")
    ap.add_argument(
        "--no-bound",
        dest="bound",
        action="store_false",
        help="skip the oracle bound (see the module doc)",
    )
    ap.add_argument(
        "--scan",
        type=float,
        nargs="*",
        default=[1.0, 2.0, 3.0, 4.0, 6.0],
        help="also print the N=16 target ratios at these strength spreads (none: skip)",
    )
    ap.add_argument(
        "--targets",
        action="store_true",
        help="the adaptive format's targets: N = 32 and 64, win/loss, round robin, Swiss and the adaptive budgets",
    )
    ap.add_argument(
        "--quick", action="store_true", help="--targets at N = 16 with 10 trials (a smoke test)"
    )
    args = ap.parse_args(argv)
    if args.targets or args.quick:
        args.sizes = [16] if args.quick else TARGET_SIZES
        args.trials = 10 if args.quick else args.trials
        args.formats = ["round_robin", "swiss", *ADAPTIVE]
        args.outcome_only, args.bound, args.scan = True, False, []
    start = time.perf_counter()
    table = measure(
        args.sizes,
        args.formats,
        args.trials,
        args.spread,
        args.prior_noise,
        args.outcome_only,
        args.seed,
    )
    print(
        f"N = {', '.join(map(str, args.sizes))}; strengths ~ N(0, spread {args.spread}); noise: each side's performance is strength "
        f"+ Gumbel(0, 1), P(i beats j) = sigmoid(s_i - s_j); {'win/loss only' if args.outcome_only else 'scored comparisons'}; "
        f"{args.trials} trials per cell (the same populations for every format), seed {args.seed}; prior noise sd {args.prior_noise}; "
        f"{time.perf_counter() - start:.0f} s\n"
    )
    print_table(table, args.sizes, args.formats)
    if 16 in args.sizes and {"round_robin", "se_anchor", "se_prior"} <= set(args.formats):
        rr = table[16, "round_robin"]
        for fmt in ("se_prior", "se_anchor"):
            r = table[16, fmt]
            ok = r["tau"] >= 0.9 * rr["tau"] and rr["matches"] >= 7 * r["matches"]
            print(
                f"ArenaRL's claim at N=16 ({fmt}: tau >= 0.9 x RR with >= 7x fewer matches): "
                f"{r['tau'] / rr['tau']:.3f} x tau, {rr['matches'] / r['matches']:.1f}x fewer -> {'holds' if ok else 'does not hold'}"
            )
    print_targets(table, args.sizes, args.formats)
    if args.bound and (16, "round_robin") in table:
        table[16, "bound"] = print_bound(
            args.trials, args.spread, args.prior_noise, args.seed, table[16, "round_robin"]["tau"]
        )
    if args.scan:
        print(
            f"\nwhere the claim holds (N=16, {args.trials} trials per cell): tau as a fraction of round robin's, by strength spread"
        )
        print(
            f"{'spread':>6}  {'RR tau':>6}  {'se_anchor (4x fewer)':>20}  {'se_prior (8x fewer)':>19}  {'prior alone':>11}"
        )
        for spread in args.scan:
            t = measure(
                [16],
                ["round_robin", "se_anchor", "se_prior", "prior"],
                args.trials,
                spread,
                args.prior_noise,
                args.outcome_only,
                args.seed,
            )
            rr = t[16, "round_robin"]["tau"]
            print(
                f"{spread:>6.1f}  {rr:>6.3f}  {t[16, 'se_anchor']['tau'] / rr:>20.3f}  {t[16, 'se_prior']['tau'] / rr:>19.3f}"
                f"  {t[16, 'prior']['tau'] / rr:>11.3f}"
            )
    if args.plot:
        plot(table, args.sizes, args.formats, args.plot)
    return table


if __name__ == "__main__":
    main()
