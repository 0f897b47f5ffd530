"""Does Advantage Alignment find the cooperative split in Trust-and-Split without being exploited?

    python -m experiments.trust_and_split.study --seeds 60 61 62 --out runs/trust_and_split

For every (estimator, seed): `arena train` on CONFIG (default
`experiments/trust_and_split/train_tas_aa.yaml`: hand messages, a memory-1 state text) with
`advantage.estimator` and `seed` replaced, then `arena eval`'s code on the final policy, at its
training temperature, in self-play and against always_defect (the greedy bot: it names its
hand truly and claims every coin) and tit_for_tat, on the game parameters it trained on. The
evaluation seed fixes each match's seed, and a match's seed deals its hands: two runs
evaluated with one --eval-seed meet the same hands in the same matches. Per run:

    welfare         self-play: both players' points over the social optimum (the winning
                    hand takes every coin: coins x high_value a round), mean over matches
    honest          self-play: share of its messages that name its own hand
    claim_win       self-play: mean claim holding the winning hand ...
    claim_lose      ... and the losing hand (cooperation: 10 and 0; greed: 10 and 10)
    payoff_greedy   points per match against always_defect
    greedy_bar      what always_defect earns against itself on those matches' hands (5
                    coins a round at the seat's coin value): mutual greed
    tft_bar         what tit_for_tat earns against always_defect on the same matches (same
                    seed, so the same hands, in the agent's seat): the robust reciprocator's
                    score. Tit-for-tat judges the round before only, and greed defects only
                    with the losing hand, so tit-for-tat concedes every losing round that is
                    the first or follows another lost one (5 points each at default values)
    vs_tft          payoff_greedy minus tit_for_tat's points, paired over the same matches
                    (mean and t interval over matches)
    not_exploited   vs_tft's interval reaches 0 or above: greed takes no more from it than
                    from tit-for-tat, within the evaluation's noise (a policy sampled at
                    temperature 1 sometimes claims little with the winning hand, which no
                    opponent caused)
    payoff_tft      points per match against tit_for_tat

With free-text messages (`messages: free`) the evaluation also plays every match with the
messages blanked and reads the agent's claims (`evaluation.messages`), and a pretrained model
also meets `base`, the model as released playing as the run's agent does (the paper's first
claim: an RL-trained agent exploits the base model):

    truthful        self-play: share of the agent's hand claims that are true (a message
                    that names exactly one hand claims it) ...
    truthful_losing ... and of those made holding the losing hand
    blanked_welfare self-play welfare with every message blanked, the same matches
    messages_gain   welfare - blanked_welfare, paired match by match (bootstrap 95% CI)
    payoff_base     points per match against base, and base's points in those matches
    base_payoff     (`base_payoff`); vs_base: the agent's minus base's, t interval over matches

Per seed, the welfare difference Advantage Alignment - mars is paired over the same
self-play matches (t interval over matches); the summary row pools the seeds' differences
(t interval over seeds). Output in --out: one folder per run (a finished run is not trained
again), `trust_and_split.json`, `trust_and_split.md` (the table) and the figure (--figure,
default OUT/trust_and_split.png); with an --eval-seed other than 7, `trust_and_split_seedS.*`
beside them (the runs are evaluated again on that seed's matches, in RUN/eval_step<N>_seedS).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from experiments.reciprocity.reciprocity_study import (
    EVAL_SEED,
    bars_by_estimator,
    evaluate_run,
    run_study,
    save_figure,
    study_arguments,
)

OPPONENTS = ["self", "always_defect", "tit_for_tat"]
BASE = "base"  # the pretrained model as released, an opponent of free-message runs


@dataclass
class RunResult:
    estimator: str
    seed: int
    train_minutes: float
    steps: int
    welfare: float
    welfare_ci: tuple[float, float]
    honest: float | None  # None: the game sends no messages (messages: reveal)
    claim_win: float
    claim_lose: float
    payoff_greedy: float
    payoff_greedy_ci: tuple[float, float]
    greedy_bar: float
    tft_bar: float
    vs_tft: tuple[float, float, float]
    not_exploited: bool
    payoff_tft: float
    payoff_tft_ci: tuple[float, float]
    welfare_by_match: dict[str, float]  # self-play match (game|opponent|k) -> welfare share
    load: float = 0.0
    truthful: float | None = None  # free messages (see the module doc)
    truthful_losing: float | None = None
    blanked_welfare: float | None = None
    messages_gain: tuple[float, float, float] | None = None
    payoff_base: float | None = None  # a pretrained model against its base
    base_payoff: float | None = None
    vs_base: tuple[float, float, float] | None = None


def free_messages(cfg) -> bool:
    return cfg.games[0].params.get("messages", "free") == "free"


def opponents_for(cfg) -> list:
    """The study's opponents; a pretrained model with free messages also meets `base`."""
    from dataclasses import asdict

    if not free_messages(cfg) or cfg.model.startswith("tiny-llama"):
        return list(OPPONENTS)
    options = {k: v for k, v in asdict(cfg.agent).items() if k != "seed"}
    return [*OPPONENTS, {"type": "llm", "model": cfg.model, "name": BASE, **options}]


def match_welfare(rec, env) -> float:
    """Both players' points in a match over its social optimum (`env`: the match replayed)."""
    from evaluation.social import social_optimum_per_round

    return sum(rec.returns.values()) / (social_optimum_per_round(env) * len(env.results))


def self_play_behaviour(envs) -> tuple[float | None, float, float]:
    """(share of honest messages, None without messages; mean claim with the winning hand,
    with the losing hand) over the self-play matches (replayed), both seats."""
    from games.trust_and_split import hand_message

    honest, claims = [], {True: [], False: []}
    for env in envs:
        for k, res in enumerate(env.results):
            for speaker, text in env.messages[k]:
                honest.append(text == hand_message(res.hands[speaker]))
            for p in (0, 1):
                claims[res.values[p] > res.values[1 - p]].append(res.claims[p])
    return (
        float(np.mean(honest)) if honest else None,
        float(np.mean(claims[True])),
        float(np.mean(claims[False])),
    )


def greedy_bar(records, envs, agent: str) -> list[float]:
    """Per match against always_defect (`envs`: the matches replayed): what always_defect
    would earn in the agent's seat (half the coins every round, at that seat's coin value)."""
    out = []
    for rec, env in zip(records, envs):
        seat = next(s for s, who in rec.seats.items() if who == agent)
        p = env.possible_agents.index(seat)
        out.append(sum(env.coins / 2 * res.values[p] for res in env.results))
    return out


def tit_for_tat_bar(records, envs, agent: str) -> list[float]:
    """Per match against always_defect (`envs`: the matches replayed): what tit_for_tat earns
    in the agent's seat against always_defect, the match played again from its seed."""
    from agents import make_agent
    from arena.runner import MatchPlan, play
    from evaluation.social import replay

    bot = {True: "tit_for_tat", False: "always_defect"}
    plans = [
        MatchPlan(
            r.match_id,
            r.game,
            [bot[who == agent] for who in r.seats.values()],
            seed=r.seed,
            params=dict(r.params),
        )
        for r in records
    ]
    again = {r.match_id: r for r in play(plans, {b: make_agent(b) for b in bot.values()})}
    out = []
    for rec, played in zip(records, envs):
        bots = again[rec.match_id]
        if [x.hands for x in replay(bots).results] != [x.hands for x in played.results]:
            raise RuntimeError(f"match {rec.match_id}: replayed from its seed, the hands differ")
        out.append(sum(v for s, v in bots.returns.items() if bots.seats[s] == "tit_for_tat"))
    return out


def summarise(records, estimator: str, seed: int, trained: dict) -> RunResult:
    from evaluation.run import AGENT
    from evaluation.social import replay
    from evaluation.stats import mean_ci
    from evaluation.suites import BLANKED, plan_key

    everything = records
    records = [r for r in records if not plan_key(r.match_id)[0].endswith(BLANKED)]

    def against(opponent: str) -> list:  # "self": the policy's copy holds the other seat
        return [r for r in records if opponent in r.seats.values()]

    def own(recs) -> list[float]:  # the agent's points, in matches where it holds one seat
        return [sum(v for s, v in r.returns.items() if r.seats[s] == AGENT) for r in recs]

    selfplay = against("self")
    selfplay_envs = [replay(r) for r in selfplay]
    # keyed by the match without the agent's name: two runs' match k has one seed and seating
    welfare = {
        r.match_id.split("|", 1)[1]: match_welfare(r, env)
        for r, env in zip(selfplay, selfplay_envs)
    }
    w = mean_ci(list(welfare.values()))
    honest, claim_win, claim_lose = self_play_behaviour(selfplay_envs)
    greedy = against("always_defect")
    greedy_envs = [replay(r) for r in greedy]
    own_g = own(greedy)
    pay_g = mean_ci(own_g)
    bar = float(np.mean(greedy_bar(greedy, greedy_envs, AGENT)))
    tft = tit_for_tat_bar(greedy, greedy_envs, AGENT)
    vs_tft = mean_ci([a - b for a, b in zip(own_g, tft)])
    pay_t = mean_ci(own(against("tit_for_tat")))
    extra = message_fields(everything) | base_fields(against(BASE), own)
    return RunResult(
        estimator,
        seed,
        trained["minutes"],
        trained["steps"],
        w[0],
        (w[1], w[2]),
        honest,
        claim_win,
        claim_lose,
        pay_g[0],
        (pay_g[1], pay_g[2]),
        bar,
        float(np.mean(tft)),
        tuple(vs_tft),
        bool(vs_tft[2] >= -1e-9),
        pay_t[0],
        (pay_t[1], pay_t[2]),
        welfare,
        trained.get("load", 0.0),
        **extra,
    )


def message_fields(records) -> dict:
    """The free-message fields of the self-play row (`evaluation.messages`); none without."""
    from evaluation.messages import messages_rows
    from evaluation.run import AGENT

    row = next((r for r in messages_rows(records, AGENT) if r.opponent == "self"), None)
    if row is None or row.messages_gain is None:
        return {}
    return {
        "truthful": row.truthful,
        "truthful_losing": row.truthful_losing,
        "blanked_welfare": row.blanked_welfare,
        "messages_gain": (row.messages_gain, *row.messages_gain_ci),
    }


def base_fields(records, own) -> dict:
    """Points against the base model, its points, and the paired difference; none without."""
    from evaluation.stats import mean_ci

    if not records:
        return {}
    mine = own(records)
    theirs = [sum(v for s, v in r.returns.items() if r.seats[s] == BASE) for r in records]
    return {
        "payoff_base": float(np.mean(mine)),
        "base_payoff": float(np.mean(theirs)),
        "vs_base": tuple(mean_ci([a - b for a, b in zip(mine, theirs)])),
    }


def evaluate(cfg, trained: dict, estimator: str, seed: int, args) -> RunResult:
    """The study's row for one trained run."""
    records = evaluate_run(cfg, opponents_for(cfg), args, trained["steps"], free_messages(cfg))
    return summarise(records, estimator, seed, trained)


def paired_welfare(a: RunResult, b: RunResult) -> tuple[float, float, float, int]:
    """a - b welfare over the self-play matches both played (same match seed, same hands):
    (mean, low, high, matches), a t interval over matches."""
    from evaluation.stats import mean_ci

    shared = sorted(set(a.welfare_by_match) & set(b.welfare_by_match))
    if not shared:
        raise ValueError(f"seed {a.seed}: no self-play match in common (use one --eval-seed)")
    m = mean_ci([a.welfare_by_match[k] - b.welfare_by_match[k] for k in shared])
    return (*m, len(shared))


def markdown(results: list[RunResult]) -> str:
    from evaluation.stats import mean_ci

    def share(values):
        values = [v for v in values if v is not None]
        return f"{np.mean(values):.2f}" if values else "-"

    def ci(v, lo_hi, digits=2):
        return f"{v:.{digits}f} [{lo_hi[0]:.{digits}f}, {lo_hi[1]:.{digits}f}]"

    lines = [
        "| estimator | seed | welfare (self-play) | honest messages | claim winning / losing | points vs always_defect (mutual greed; tit-for-tat) | minus tit-for-tat's (paired) | not exploited | points vs tit_for_tat | steps | train min (load) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.estimator} | {r.seed} | {ci(r.welfare, r.welfare_ci)} | {share([r.honest])} | {r.claim_win:.1f} / {r.claim_lose:.1f} | "
            f"{ci(r.payoff_greedy, r.payoff_greedy_ci, 1)} ({r.greedy_bar:.1f}; {r.tft_bar:.1f}) | {r.vs_tft[0]:+.2f} [{r.vs_tft[1]:+.2f}, {r.vs_tft[2]:+.2f}] | {'yes' if r.not_exploited else 'no'} | "
            f"{ci(r.payoff_tft, r.payoff_tft_ci, 1)} | {r.steps} | {r.train_minutes:.1f} ({r.load:.1f}) |"
        )
    for est in dict.fromkeys(r.estimator for r in results):
        rs = [r for r in results if r.estimator == est]
        w = mean_ci([r.welfare for r in rs])
        g = mean_ci([r.payoff_greedy for r in rs])
        lines.append(
            f"| **{est}** | mean of {len(rs)} | {ci(w[0], w[1:])} | {share([r.honest for r in rs])} | "
            f"{np.mean([r.claim_win for r in rs]):.1f} / {np.mean([r.claim_lose for r in rs]):.1f} | "
            f"{ci(g[0], g[1:], 1)} ({np.mean([r.greedy_bar for r in rs]):.1f}; {np.mean([r.tft_bar for r in rs]):.1f}) | {np.mean([r.vs_tft[0] for r in rs]):+.2f} | {sum(r.not_exploited for r in rs)}/{len(rs)} | "
            f"{np.mean([r.payoff_tft for r in rs]):.1f} | {np.mean([r.steps for r in rs]):g} | {np.mean([r.train_minutes for r in rs]):.1f} |"
        )
    lines += message_table(results)
    pairs = paired_rows(results)
    if pairs:
        lines += [
            "",
            "| seed | welfare, advantage_alignment - mars (paired over the same matches) | matches |",
            "|---|---|---|",
        ]
        for seed, (m, lo, hi, n) in pairs.items():
            lines.append(f"| {seed} | {m:+.3f} [{lo:+.3f}, {hi:+.3f}] | {n} |")
        if len(pairs) > 1:
            m, lo, hi = mean_ci([v[0] for v in pairs.values()])
            lines.append(
                f"| mean of {len(pairs)} seeds | {m:+.3f} [{lo:+.3f}, {hi:+.3f}] (t over seeds) | |"
            )
    return "\n".join(lines) + "\n"


def message_table(results: list[RunResult]) -> list[str]:
    """The free-message and base-model columns, for the runs that have them."""
    rs = [r for r in results if r.messages_gain is not None or r.vs_base is not None]
    if not rs:
        return []

    def num(v, fmt=".2f"):
        return "-" if v is None else format(v, fmt)

    def diff(t):
        return "-" if t is None else f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"

    lines = [
        "",
        "| estimator | seed | truthful claims (holding the losing hand) | welfare, messages blanked | messages' gain (paired) | points vs base (base's) | minus base's (paired) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        lines.append(
            f"| {r.estimator} | {r.seed} | {num(r.truthful)} ({num(r.truthful_losing)}) | {num(r.blanked_welfare)} | "
            f"{diff(r.messages_gain)} | {num(r.payoff_base, '.1f')} ({num(r.base_payoff, '.1f')}) | {diff(r.vs_base)} |"
        )
    return lines


def paired_rows(results: list[RunResult]) -> dict[int, tuple]:
    """seed -> paired_welfare(advantage_alignment, mars) for every seed that has both."""
    by = {(r.estimator, r.seed): r for r in results}
    return {
        seed: paired_welfare(by[("advantage_alignment", seed)], by[("mars", seed)])
        for seed in dict.fromkeys(r.seed for r in results)
        if ("advantage_alignment", seed) in by and ("mars", seed) in by
    }


def figure(results: list[RunResult], path: Path) -> None:
    """Welfare, points against always_defect (beside mutual greed) and the claims by hand:
    a bar per estimator (mean over seeds, t 95% CI) and a dot per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("welfare", "welfare share in self-play", (0, 1)),
        ("payoff_greedy", "points vs always_defect", None),
        ("claim_win", "claim with the winning hand", (0, 10)),
        ("claim_lose", "claim with the losing hand", (0, 10)),
    ]
    estimators = list(dict.fromkeys(r.estimator for r in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for ax, (key, title, ylim) in zip(axes, panels):
        bars_by_estimator(ax, results, key, estimators, ylim)
        ax.set_title(title, fontsize=9)
        if key == "payoff_greedy":
            bar = float(np.mean([r.greedy_bar for r in results]))
            ax.axhline(bar, color="gray", ls="--", lw=1, label="mutual greed")
            tft = float(np.mean([r.tft_bar for r in results]))
            ax.axhline(tft, color="gray", ls=":", lw=1, label="tit-for-tat (the bar)")
            ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, results, "Trust-and-Split", path)


def main(argv: list[str] | None = None) -> list[RunResult]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    study_arguments(
        p, "experiments/trust_and_split/train_tas_aa.yaml", [60, 61, 62], "runs/trust_and_split"
    )
    p.add_argument(
        "--figure", default=None, help="figure path (default OUT/trust_and_split[_seedS].png)"
    )
    args = p.parse_args(argv)
    # another evaluation seed writes beside the default one's files: trust_and_split_seed11.json
    name = "trust_and_split" + ("" if args.eval_seed == EVAL_SEED else f"_seed{args.eval_seed}")

    def saved(results: list[RunResult], out: Path) -> None:
        table = markdown(results)
        (out / f"{name}.md").write_text(table)
        (out / f"{name}.json").write_text(json.dumps([asdict(x) for x in results], indent=1))
        print(table, flush=True)

    results = run_study(p, args, evaluate, saved)
    out = Path(args.out)
    figure(results, Path(args.figure) if args.figure else out / f"{name}.png")
    return results


if __name__ == "__main__":
    main()
