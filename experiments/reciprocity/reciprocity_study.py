"""Does Advantage Alignment learn reciprocity? Train and evaluate both estimators on several seeds.

    python -m experiments.reciprocity.reciprocity_study --seeds 50 51 52 53 54 --out runs/reciprocity_causal

For every (estimator, seed): `arena train` on CONFIG (default
`experiments/reciprocity/train_ipd_aa_causal.yaml`, the shipped recipe)
with `advantage.estimator` and `seed` replaced (everything else, the budget included, is
the config's), then `arena eval`'s code (`evaluation.run.run_eval`) on the final policy,
sampling at its training temperature, against tit_for_tat, always_defect, probe (tit-for-tat
that defects once, in round 2: after the policy's answer to it the state DC is reached, which
tells tit-for-tat from grim trigger) and itself (`self`), on the game parameters it trained
on. Per run:

    coop_tft        cooperation rate with tit_for_tat
    coop_self       cooperation rate in self-play (the agent's seat)
    reciprocity     P(cooperate | the other cooperated last round) - P(cooperate | it
                    defected), over all four opponents' matches: tit-for-tat 1, any
                    unconditional policy 0
    payoff_tft      mean points per match against tit_for_tat
    payoff_ad       mean points per match against always_defect
    not_exploited   payoff_ad >= mutual defection's payoff minus one round's P - S (what
                    tit-for-tat itself concedes: it cooperates once)
    profile         the memory-1 profile over all four opponents' matches: P(C) in round 1
                    and after each last round CC, CD, DC, DD (own move first), each
                    [p, low, high, visits], exact from the policy's own distributions
                    (`evaluation.social.memory1_profile`); tit-for-tat 1, 0, 1, 0
    nearest         the named strategy nearest to the profile (tit_for_tat, alternation, ...)
                    and its Euclidean distance over the visited states: reciprocity scores
                    tit-for-tat and alternation (0, 0, 1, 0) alike, the profile does not

`--state-gradients` (no training) asks what each estimator teaches a memory-1 policy: a
stochastic player cooperating with probability p[s] in state s (`first`, or the other's
last move `C` / `D`) plays the training mix's opponents (itself, or a bot), the matches
are scored by each estimator, and per state it prints the policy-gradient direction of a
tabular policy, mean over the learner's turns in s of A * (1[cooperated] - p[s]):
positive pushes cooperation in s. Reciprocity needs C > 0 > D.

`--supervised` asks whether the network can read the move at all: the config's model, from its
initialisation, fitted by cross-entropy to tit-for-tat's replies on its own prompts
(`supervised_tit_for_tat`), with the held-out probability of tit-for-tat's move per state.

`--tabular` (no network) follows those updates: a tabular memory-1 policy (a logit per state,
from p = 0.5) trained in self-play by each estimator, iteration by iteration
(`tabular_learning`): where nothing is shared between states, does the estimator reach
tit-for-tat (C after C, D after D) or defection? It plays the config's first game: the
iterated prisoner's dilemma, or Trust-and-Split (`--config
experiments/trust_and_split/train_tas_aa_reveal.yaml`: the losing hand claims nothing or
every coin, the winning hand every coin; only the losing hand's claims are decisions), or
4-player public goods (`--config experiments/public_goods/train_pg_aa_reciprocal.yaml`: all
four seats the learner; to contribute is to put the whole endowment in, and the state `C`
means every other player did last round).

Each run's figures carry 95% CIs over its evaluation matches; the table's summary rows
give, per estimator, the mean over seeds with a t interval over the seeds. Output in
--out: one folder per run (a finished run is not trained again), `reciprocity.json`,
`reciprocity.md` (the table) and the figure (`--figure`, default OUT/reciprocity.png).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from core.overrides import merge, parse_overrides
from evaluation.social import STATES

ESTIMATORS = ("advantage_alignment", "mars")
OPPONENTS = ["tit_for_tat", "always_defect", "probe", "self"]
EVAL_SEED = 7  # the evaluation seed: it fixes every evaluation match (seed, seating, hands)


@dataclass
class RunResult:
    estimator: str
    seed: int
    train_minutes: float
    steps: int
    coop_tft: float
    coop_tft_ci: tuple[float, float]
    coop_self: float
    coop_self_ci: tuple[float, float]
    reciprocity: float | None
    payoff_tft: float
    payoff_tft_ci: tuple[float, float]
    payoff_ad: float
    payoff_ad_ci: tuple[float, float]
    mutual_defection: float  # P x rounds: what always_defect against itself earns
    not_exploited: bool
    load: float = 0.0  # the machine's 1-minute load average when training ended
    profile: dict[str, list] | None = None  # state -> [p, low, high, visits] (p None: unvisited)
    profile_method: str = ""  # "exact" | "counted"
    nearest: str | None = None
    nearest_distance: float | None = None


@dataclass
class Memory1:
    """An `Agent` for the IPD cooperating with probability `p[state]`, state = `first` in round
    one, else the other's last move (`C` or `D`), or with `own_move` the last round's two moves,
    own first (`CC`, `CD`, `DC`, `DD`), or with `counted` how many others cooperated (`0`, `1`,
    ...); its turns carry one token so that they learn."""

    p: dict[str, float]
    name: str = "learner"
    seed: int = 0
    own_move: bool = False
    counted: bool = False

    def __post_init__(self) -> None:
        # its own stream, as an LLM's sampler: the two self-play matches of a seed differ
        self.rng = np.random.default_rng(self.seed)

    def act(self, turns: list) -> list:
        from agents.social_bots import social_decision

        return [social_decision(turn, self.name, self.cooperates, token_ids=[0]) for turn in turns]

    def cooperates(self, history: list) -> bool:
        state = memory1_state(history, self.own_move, self.counted)
        return bool(self.rng.random() < self.p[state])

    def end_match(self, match_id: str) -> None:
        pass


def memory1_state(history: list, own_move: bool = False, counted: bool = False) -> str:
    """The state of a memory-1 policy after `history` (`cooperation_history`: per round, own
    move and the others'): `first`, else the other's last move `C` / `D` (`C`: every other
    player cooperated), or with `own_move` both last moves, own first (`CC`, `CD`, `DC`, `DD`),
    or with `counted` how many of the others cooperated (`0` .. `n - 1`)."""
    if not history:
        return "first"
    mine, others = history[-1]
    if counted:
        return str(sum(others))
    other = "C" if all(others) else "D"
    return ("C" if mine else "D") + other if own_move else other


def state_gradients(
    p: dict[str, float],
    opponent: str,
    configs: dict,
    matches: int = 400,
    seed: int = 0,
    game: str = "prisoners_dilemma",
    params: dict | None = None,
) -> dict[str, dict[str, float]]:
    """Per estimator config (name -> AdvantageConfig), per state: mean of A (1[C] - p[state])
    over the `Memory1(p)` learner's turns, in matches of `game` against `opponent` (`self`: a
    second Memory1(p) that learns too, as in self-play; else a social bot). Two matches per
    seed, one per seat order, as the training loop's loo groups. Only the turns where
    cooperating and defecting are different moves count (`decisions`: in Trust-and-Split the
    winning hand claims every coin either way)."""
    import games
    from agents import make_agent
    from arena.runner import MatchPlan, play
    from training.advantages import compute_advantages

    own_move = any(len(s) == 2 for s in p)
    counted = any(s.isdigit() for s in p)
    learner = Memory1(p, seed=seed, own_move=own_move, counted=counted)
    other = learner if opponent == "self" else make_agent(opponent)
    n = len(games.make(game, **(params or {})).possible_agents)  # the seats with these params
    plans = [
        MatchPlan(
            f"{s}-{order}",
            game,
            [learner.name, other.name][:: 1 - 2 * order] + [learner.name] * (n - 2),
            seed + s,
            dict(params or {}),
        )
        for s in range(matches // 2)
        for order in (0, 1)
    ]
    records = sorted(
        play(plans, {learner.name: learner, other.name: other}, concurrency=64),
        key=lambda r: r.match_id,
    )
    states, cooperated = (
        [],
        [],
    )  # per match, per turn: the mover's state, its move (None: no choice)
    for r in records:
        s, c = decisions(r, own_move, counted)
        states.append(s)
        cooperated.append(c)
    out = {}
    for name, cfg in configs.items():
        by_state: dict[str, list[float]] = {}
        for x in compute_advantages(records, replace(cfg, learners=[learner.name])):
            state, move = (
                states[x.match_index][x.turn_index],
                cooperated[x.match_index][x.turn_index],
            )
            if move is None:
                continue
            by_state.setdefault(state, []).append(x.advantage * (move - p[state]))
        out[name] = {s: float(sum(v) / len(v)) for s, v in sorted(by_state.items())}
    return out


def starting_point(pairs: list[str]) -> dict[str, float]:
    """`--start first=0.9 C=0.9 D=0.1` -> {state: p}; ValueError unless each p is in (0, 1)."""
    out = {}
    for pair in pairs:
        state, _, value = pair.partition("=")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if not state or not 0 < p < 1:
            raise ValueError(f"--start {pair!r}: expected STATE=P with P strictly between 0 and 1")
        out[state] = p
    return out


def decisions(
    rec, own_move: bool = False, counted: bool = False
) -> tuple[list[str], list[bool | None]]:
    """Per turn of a recorded match, replayed from its seed: the mover's memory-1 state, and
    whether its move was the cooperative one (None where cooperating and defecting are the
    same move, or the turn is not a decision of the social game's, e.g. a message)."""
    from evaluation.social import replay

    states, moves = [], []

    def record(env, t) -> None:
        states.append(memory1_state(env.cooperation_history(t.player), own_move, counted))
        c, d = env.social_action(t.player, True), env.social_action(t.player, False)
        moves.append(None if c == d else t.action == c)

    replay(rec, before_turn=record)
    return states, moves


def memory1_states(
    own_move: bool = False, counted: bool = False, game: str = "", params: dict | None = None
) -> tuple[str, ...]:
    """The states `memory1_state` names: `first`, then `C`, `D`; or the four pairs of moves
    (`own_move`); or `0` .. `n - 1` others cooperating (`counted`, n the seats of `game`)."""
    if counted:
        import games

        n = len(games.make(game, **(params or {})).possible_agents)
        return ("first", *(str(k) for k in range(n)))
    return ("first", *(STATES if own_move else ("C", "D")))


def tabular_learning(
    adv,
    opponent: str = "self",
    iterations: int = 30,
    matches: int = 200,
    lr: float = 0.5,
    seed: int = 0,
    own_move: bool = False,
    game: str = "prisoners_dilemma",
    params: dict | None = None,
    start: dict[str, float] | None = None,
    counted: bool = False,
) -> list[dict[str, float]]:
    """A tabular memory-1 policy (one logit per state, all 0: p = 0.5, or p = `start[s]` where
    given) trained by `adv`'s estimator:
    each iteration plays `matches` matches against `opponent` (`self`: the policy itself, both
    seats learning), takes `state_gradients` and moves every state's logit by lr x g[s] / max |g|
    (a scale-free step, as Adam's). Returns p per state before each iteration and after the last.
    What the estimator teaches when nothing is shared between states: the network policy's
    learning is this plus generalisation across states. With `own_move` the states are the
    last round's two moves (`memory1_state`): alternation (C only after DC) can be learned;
    with `counted` they are how many others cooperated (games of more than two players)."""
    theta = {s: 0.0 for s in memory1_states(own_move, counted, game, params)}
    start = start or {}
    if set(start) - set(theta):
        raise ValueError(f"--start: the states are {', '.join(theta)}; got {', '.join(start)}")
    theta |= {s: float(np.log(q / (1 - q))) for s, q in start.items()}
    history = []
    for it in range(iterations):
        p = {s: float(1 / (1 + np.exp(-v))) for s, v in theta.items()}
        history.append(p)
        g = state_gradients(p, opponent, {"x": adv}, matches, seed + it, game, params)["x"]
        scale = max((abs(v) for v in g.values()), default=0.0) or 1.0
        for s in theta:
            theta[s] += lr * g.get(s, 0.0) / scale
    history.append({s: float(1 / (1 + np.exp(-v))) for s, v in theta.items()})
    return history


def tabular_table(
    config: str,
    iterations: int = 30,
    matches: int = 200,
    seed: int = 0,
    overrides: dict | None = None,
    own_move: bool = False,
    start: dict[str, float] | None = None,
    counted: bool = False,
) -> str:
    """`tabular_learning` in self-play for the config's advantage_alignment and for mars, on the
    config's first game: p per state every 5 iterations (`own_move`: the states are the last
    round's two moves; `counted`: how many others cooperated; `start`: p per state at
    iteration 0, 0.5 where not given)."""
    cfg = train_config(config, "advantage_alignment", 0, Path("unused"), overrides=overrides)
    adv, game = cfg.advantage, cfg.games[0]
    states = memory1_states(own_move, counted, game.name, game.params)
    lines = [
        "| estimator | iteration | " + " | ".join(f"p(C) {s}" for s in states) + " |",
        "|---|---|" + "---|" * len(states),
    ]
    for name, cfg in (
        (f"advantage_alignment (beta {adv.aa_beta:g})", adv),
        ("mars", replace(adv, estimator="mars")),
    ):
        history = tabular_learning(
            cfg,
            "self",
            iterations,
            matches,
            seed=seed,
            own_move=own_move,
            game=game.name,
            params=game.params,
            start=start,
            counted=counted,
        )
        for it, p in enumerate(history):
            if it % 5 == 0 or it == iterations:
                lines.append(
                    f"| {name} | {it} | " + " | ".join(f"{p[s]:.2f}" for s in states) + " |"
                )
    return "\n".join(lines) + "\n"


def tit_for_tat_examples(
    agent,
    tokenizer,
    game: str,
    params: dict,
    matches: int,
    seed: int,
    graded: bool = False,
    every_seat: bool = False,
) -> list[tuple[str, object]]:
    """(state, `TrainingSequence`) for every decision of the first seat (`every_seat`: the next
    seat each match) in `matches` matches of `game` between memory-1 players with random
    cooperation rates (0.1-0.9), one a seat: the agent's prompt,
    tit-for-tat's move as the target. The state is the memory-1 state (`first`, `C`, `D`);
    a turn where cooperating and defecting are the same move (Trust-and-Split's winning hand)
    is labelled `no choice`.

    `graded` (games whose moves are amounts 0..n, as public goods' contributions): the players
    put in random amounts (a level drawn once a match, each move that level plus normal noise of
    sd 2, rounded and clipped), and the target is the least amount any other player put in last
    round (everything in round one): tit-for-tat that answers a partial contribution in kind."""
    import games
    from agents.base import PendingTurn
    from training.sequences import TrainingSequence, render_prompt

    rng = np.random.default_rng(seed)
    out = []
    for m in range(matches):
        env = games.make(game, **params)
        env.reset(seed=seed + m)
        learner = env.possible_agents[m % len(env.possible_agents) if every_seat else 0]
        p = {a: rng.uniform(0.1, 0.9) for a in env.possible_agents}
        while env.agents:
            player = env.agent_selection
            if env.terminations[player] or env.truncations[player]:
                env.step(None)
                continue
            state = memory1_state(env.cooperation_history(player))
            coop, defect = env.social_action(player, True), env.social_action(player, False)
            if player == learner:
                turn = PendingTurn(f"tft{m}", env, player, rng)
                view = env.view(player)
                move = defect if state == "D" else coop
                if graded:
                    moves = env.round_moves(player)
                    move = min(moves[-1][1]) if moves else coop
                target = env.move_text(player, move)
                reply = tokenizer(agent.reply_for(target), add_special_tokens=False)[
                    "input_ids"
                ] + [tokenizer.eos_token_id]
                out.append(
                    (
                        state if coop != defect else "no choice",
                        TrainingSequence(
                            render_prompt(tokenizer, agent.prompt_messages(turn)),
                            reply,
                            1.0,
                            None,
                            list(view.legal_moves),
                        ),
                    )
                )
            if graded:
                top = env.num_moves - 1
                env.step(int(np.clip(round(rng.normal(p[player] * top, 2)), 0, top)))
            else:
                env.step(coop if rng.random() < p[player] else defect)
    return out


def supervised_tit_for_tat(
    config: str,
    steps: int = 40,
    batch: int = 64,
    every: int = 10,
    seed: int = 0,
    save: Path | None = None,
    graded: bool = False,
    every_seat: bool = False,
) -> list[dict]:
    """Can the config's model (freshly initialised for its seed) read the other's last move from its
    prompt? Cross-entropy on tit-for-tat's replies (`tit_for_tat_examples`: 50 matches to train on,
    10 held out), Adam at the config's `learner.lr`, fp32; every `every` steps the mean probability of
    tit-for-tat's move on the held-out turns per state. Returns those rows (step, loss, state -> p).
    `save`: the fitted model and its tokenizer written there as a Hugging Face folder, a `model:`
    a config can start from (a warm start). `graded` (tit-for-tat in kind), `every_seat` (the
    examples from every seat in turn): `tit_for_tat_examples`."""
    import torch

    from experiments.supervised_bound.supervised_bound import fit_step, fresh_policy

    cfg = train_config(config, "mars", seed, Path("unused"))
    model, tok, learner, agent = fresh_policy(cfg)
    game = cfg.games[0]
    train, held = (
        tit_for_tat_examples(agent, tok, game.name, game.params, 50, seed, graded, every_seat),
        tit_for_tat_examples(
            agent, tok, game.name, game.params, 10, seed + 1000, graded, every_seat
        ),
    )
    by_state: dict[str, list] = {}
    for state, seq in held:
        by_state.setdefault(state, []).append(seq)

    def p_target() -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            out = {
                s: sum(float(logp.exp().sum()) for logp, _ in learner.completion_logprobs(seqs))
                / len(seqs)
                for s, seqs in sorted(by_state.items())
            }
        model.train()
        return out

    rng = np.random.default_rng(seed)
    optimizer = torch.optim.Adam(learner.parameters(), lr=cfg.learner.lr)
    rows, losses = [{"step": 0, "loss": float("nan"), "p": p_target()}], []
    for step in range(1, steps + 1):
        losses.append(
            fit_step(
                learner,
                optimizer,
                [train[i][1] for i in rng.choice(len(train), batch, replace=False)],
                cfg.learner.max_grad_norm,
            )
        )
        if step % every == 0 or step == steps:
            rows.append({"step": step, "loss": float(np.mean(losses[-every:])), "p": p_target()})
    if save is not None:
        model.save_pretrained(save)
        tok.save_pretrained(save)
    return rows


def train_config(
    config: str,
    estimator: str,
    seed: int,
    run_dir: Path,
    steps: int | None = None,
    overrides: dict | None = None,
):
    """The study's training config: CONFIG with `overrides` (`--set`) merged in and the estimator,
    seed and run folder replaced (`training.config.load_config`: a bad file or key is one ValueError line)."""
    from training.config import load_config

    study = {
        "advantage": {"estimator": estimator},
        "seed": seed,
        "run_dir": str(run_dir),
        **({"steps": steps} if steps else {}),
    }
    return load_config(config, merge(overrides or {}, study))


def evaluate_run(cfg, opponents: list, args, step: int, blank_messages: bool = False):
    """`arena eval` of the run's final policy (at `step`) on its training game against
    `opponents` (args: matches, eval_seed, concurrency; `blank_messages`: every match again
    with the messages blanked, `evaluation.messages`): its match records (store:
    RUN/eval_step<step>, or RUN/eval_step<step>_seed<S> for an evaluation seed other than the
    default, so a run trained further, or evaluated on other matches, is evaluated anew)."""
    from evaluation.run import run_eval
    from evaluation.suites import EvalConfig, EvalGame

    game = cfg.games[0]
    entry = EvalGame(game.name, params=dict(game.params), opponents=list(opponents))
    entry.blank_messages = blank_messages
    ev = EvalConfig(
        agent=f"llm:{cfg.run_dir}",
        games=[entry],
        matches=args.matches,
        seed=args.eval_seed,
        concurrency=args.concurrency,
        out=str(Path(cfg.run_dir) / eval_folder(step, args.eval_seed)),
    )
    return run_eval(ev).records


def eval_folder(step: int, eval_seed: int) -> str:
    """The evaluation store's folder in a run: one per (step, evaluation seed)."""
    return f"eval_step{step}" + ("" if eval_seed == EVAL_SEED else f"_seed{eval_seed}")


def summarise(
    records, estimator: str, seed: int, minutes: float, steps: int, load: float = 0.0
) -> RunResult:
    from evaluation.metrics import cells
    from evaluation.run import AGENT
    from evaluation.social import SocialRow, dilemma_metrics, replay, social_rows

    social = {r.opponent: r for r in social_rows(records, AGENT)}
    pooled_social = SocialRow(AGENT, records[0].game, "all", len(records))
    dilemma_metrics(pooled_social, records, AGENT)
    pooled = {c.opponent: c for c in cells(records, AGENT) if c.seat == "all"}
    # mutual defection's points over the matches against always_defect (a random horizon draws each one's length)
    ad_envs = [
        replay(r)
        for r in records
        if AGENT in r.seats.values() and "always_defect" in r.seats.values()
    ]
    env = ad_envs[0]
    mutual_defection = env.P * float(np.mean([e.num_rounds for e in ad_envs]))
    ad = pooled["always_defect"]
    prof = pooled_social.profile
    profile = {
        state: [rate.p, *(rate.ci or (None, None)), rate.n]
        for state, rate in ((x, getattr(prof, x)) for x in ("first", *STATES))
    }
    return RunResult(
        estimator,
        seed,
        minutes,
        steps,
        social["tit_for_tat"].cooperation,
        tuple(social["tit_for_tat"].cooperation_ci),
        social["self"].cooperation,
        tuple(social["self"].cooperation_ci),
        pooled_social.reciprocity,
        pooled["tit_for_tat"].mean_return,
        tuple(pooled["tit_for_tat"].return_ci),
        ad.mean_return,
        tuple(ad.return_ci),
        mutual_defection,
        bool(ad.mean_return >= mutual_defection - (env.P - env.S)),
        load,
        profile,
        prof.method,
        pooled_social.nearest,
        pooled_social.nearest_distance,
    )


def markdown(results: list[RunResult]) -> str:
    from evaluation.stats import mean_ci

    def ci(v, lo_hi, digits=2):
        return f"{v:.{digits}f} [{lo_hi[0]:.{digits}f}, {lo_hi[1]:.{digits}f}]"

    def opt(v):
        return "-" if v is None else f"{v:+.2f}"

    lines = [
        "| estimator | seed | coop. with tit_for_tat | coop. in self-play | reciprocity | P(C) first | P(C \\| CC, CD, DC, DD) | nearest strategy (distance) | points vs tit_for_tat | points vs always_defect | not exploited | steps | train min (load) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.estimator} | {r.seed} | {ci(r.coop_tft, r.coop_tft_ci)} | {ci(r.coop_self, r.coop_self_ci)} | {opt(r.reciprocity)} | "
            f"{_first(r)} | {_states(profile_values(r))} | {_nearest(r)} | "
            f"{ci(r.payoff_tft, r.payoff_tft_ci, 1)} | {ci(r.payoff_ad, r.payoff_ad_ci, 1)} (mutual defection {r.mutual_defection:g}) | "
            f"{'yes' if r.not_exploited else 'no'} | {r.steps} | {r.train_minutes:.1f} ({r.load:.1f}) |"
        )
    for est in dict.fromkeys(r.estimator for r in results):
        rs = [r for r in results if r.estimator == est]
        cols = [
            mean_ci([getattr(r, k) for r in rs])
            for k in ("coop_tft", "coop_self", "payoff_tft", "payoff_ad")
        ]
        rec = [r.reciprocity for r in rs if r.reciprocity is not None]
        m = mean_ci(rec) if rec else None
        rec_text = ci(m[0], m[1:]) if m else "-"
        firsts = [
            r.profile["first"][0] for r in rs if r.profile and r.profile["first"][0] is not None
        ]
        means = {s: [v[s] for v in map(profile_values, rs) if v.get(s) is not None] for s in STATES}
        names = Counter(r.nearest for r in rs if r.nearest)
        lines.append(
            f"| **{est}** | mean of {len(rs)} | {ci(cols[0][0], cols[0][1:])} | {ci(cols[1][0], cols[1][1:])} | {rec_text} | "
            f"{f'{np.mean(firsts):.2f}' if firsts else '-'} | "
            f"{_states({s: float(np.mean(v)) if v else None for s, v in means.items()})} | "
            f"{', '.join(f'{n} {k}' for n, k in names.most_common()) or '-'} | "
            f"{ci(cols[2][0], cols[2][1:], 1)} | {ci(cols[3][0], cols[3][1:], 1)} | {sum(r.not_exploited for r in rs)}/{len(rs)} | "
            f"{sum(r.steps for r in rs) / len(rs):g} | {sum(r.train_minutes for r in rs) / len(rs):.1f} |"
        )
    return "\n".join(lines) + "\n"


def profile_values(r: RunResult) -> dict[str, float | None]:
    """P(C) per state of `STATES` ({} for a run summarised without a profile)."""
    return {s: r.profile[s][0] for s in STATES} if r.profile else {}


def _first(r: RunResult) -> str:
    p = r.profile["first"][0] if r.profile else None
    return "-" if p is None else f"{p:.2f}"


def _states(values: dict[str, float | None]) -> str:
    if not values:
        return "-"
    return ", ".join("-" if values.get(s) is None else f"{values[s]:.2f}" for s in STATES)


def _nearest(r: RunResult) -> str:
    return "-" if r.nearest is None else f"{r.nearest} ({r.nearest_distance:.2f})"


def bars_by_estimator(ax, results: list, key: str, estimators: list[str], ylim=None) -> None:
    """On `ax`, per estimator a bar at the mean of `key` over its runs (t 95% CI over seeds)
    and a dot per run."""
    from evaluation.stats import mean_ci

    for i, est in enumerate(estimators):
        vals = [
            getattr(r, key) for r in results if r.estimator == est and getattr(r, key) is not None
        ]
        if not vals:
            continue
        m, lo, hi = mean_ci(vals)
        ax.bar(i, m, color=f"C{i}", alpha=0.6, yerr=[[m - lo], [hi - m]], capsize=4)
        ax.scatter(
            np.full(len(vals), i) + np.linspace(-0.15, 0.15, len(vals)),
            vals,
            color="k",
            s=12,
            zorder=3,
        )
    ax.set_xticks(range(len(estimators)), estimators, fontsize=8)
    if ylim:
        ax.set_ylim(*ylim)


def figure(results: list[RunResult], path: Path) -> None:
    """Per metric, a bar per estimator (mean over seeds, t 95% CI) and a dot per seed; then each
    run's memory-1 profile (a line per run, coloured by estimator) beside the named strategies'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from evaluation.social import NAMED

    panels = [
        ("coop_tft", "cooperation with tit_for_tat", (0, 1)),
        ("coop_self", "cooperation in self-play", (0, 1)),
        ("reciprocity", "reciprocity: P(C|C) - P(C|D)", (-1, 1)),
        ("payoff_ad", "points vs always_defect", None),
    ]
    estimators = list(dict.fromkeys(r.estimator for r in results))
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4 * (len(panels) + 1), 3.4))
    for ax, (key, title, ylim) in zip(axes, panels):
        bars_by_estimator(ax, results, key, estimators, ylim)
        ax.set_title(title, fontsize=9)
        if key == "payoff_ad":
            ref = results[0].mutual_defection
            ax.axhline(ref, color="gray", ls="--", lw=1, label="mutual defection")
            ax.axhline(ref - 1, color="gray", ls=":", lw=1, label="tit_for_tat's payoff")
            ax.legend(fontsize=7, loc="lower right")
    ax = axes[-1]
    x = np.arange(len(STATES))
    for name, style in (("tit_for_tat", "--"), ("alternation", ":")):
        ax.plot(x, NAMED[name], color="gray", ls=style, lw=1.2, label=name)
    for i, est in enumerate(estimators):
        for j, r in enumerate(r for r in results if r.estimator == est and r.profile):
            y = [np.nan if v is None else v for v in (profile_values(r)[s] for s in STATES)]
            ax.plot(x, y, "o-", color=f"C{i}", alpha=0.7, lw=1, ms=4, label=est if j == 0 else None)
    ax.set_xticks(x, [f"after {s}" for s in STATES], fontsize=8)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("memory-1 profile per run: P(C | last round, own move first)", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, results, "iterated prisoner's dilemma", path)


def save_figure(fig, results: list, game: str, path: Path) -> None:
    """Title `fig` with the game and the seeds, write it to `path` and close it."""
    import matplotlib.pyplot as plt

    seeds = sorted({r.seed for r in results})
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    fig.suptitle(f"{game}, {which} (bars: mean, 95% t CI over seeds)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train_once(cfg) -> dict:
    """Train `cfg` in its run_dir unless a finished run of as many steps is there (a fresh run,
    a killed one, or one asked to train further resumes); {"minutes", "steps", "load"}, kept in
    RUN/study_train.json."""
    from training.selfplay import train

    done = Path(cfg.run_dir) / "study_train.json"
    trained = json.loads(done.read_text()) if done.exists() else None
    if trained and trained["steps"] > cfg.steps:
        raise ValueError(
            f"{cfg.run_dir} holds a {trained['steps']}-step run, more than the {cfg.steps} asked: choose another --out"
        )
    if not trained or trained["steps"] < cfg.steps:
        result = train(cfg, resume=True)
        trained = {
            "minutes": result["elapsed"] / 60,
            "steps": result["step"],
            "load": os.getloadavg()[0],
        }
        done.write_text(json.dumps(trained))
    return trained


def evaluate(cfg, trained: dict, estimator: str, seed: int, args) -> RunResult:
    """The study's row for one trained run."""
    records = evaluate_run(cfg, OPPONENTS, args, trained["steps"])
    return summarise(
        records, estimator, seed, trained["minutes"], trained["steps"], trained["load"]
    )


def state_gradient_table(config: str, matches: int = 1000, seed: int = 0) -> str:
    """`state_gradients` of the config's estimator, its raw form, mars and loo, for two
    unconditional memory-1 policies against itself, the random bot and tit_for_tat."""
    adv = train_config(config, "advantage_alignment", 0, Path("unused")).advantage
    configs = {
        f"advantage_alignment (beta {adv.aa_beta:g})": adv,
        f"advantage_alignment raw (beta {adv.aa_beta:g})": replace(adv, aa_normalize=False),
        "mars": replace(adv, estimator="mars"),
        "loo": replace(adv, estimator="loo"),
    }
    lines = [
        "| estimator | p(C) | opponent | first | after C | after D | C - D |",
        "|---|---|---|---|---|---|---|",
    ]
    for pc in (0.6, 0.9):
        for opponent in ("self", "random", "tit_for_tat"):
            grads = state_gradients(
                {"first": pc, "C": pc, "D": pc}, opponent, configs, matches, seed
            )
            for name, g in grads.items():
                row = [g.get(s) for s in ("first", "C", "D")]
                gap = g["C"] - g["D"] if "C" in g and "D" in g else None
                lines.append(
                    f"| {name} | {pc:g} | {opponent} | "
                    + " | ".join("-" if v is None else f"{v:+.3f}" for v in row + [gap])
                    + " |"
                )
    return "\n".join(lines) + "\n"


def study_arguments(p: argparse.ArgumentParser, config: str, seeds: list[int], out: str) -> None:
    """The arguments every estimator-by-seed study takes, with its defaults."""
    p.add_argument("--config", default=config)
    p.add_argument("--estimators", nargs="+", default=list(ESTIMATORS))
    p.add_argument("--seeds", nargs="+", type=int, default=seeds)
    p.add_argument("--steps", type=int, default=None, help="override the config's steps")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, dotted for sections (e.g. --set learner.loss.floor_decay_steps=0); repeatable",
    )
    p.add_argument("--matches", type=int, default=50, help="evaluation matches per opponent")
    p.add_argument("--eval-seed", type=int, default=EVAL_SEED)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--out", default=out)


def run_study(p: argparse.ArgumentParser, args, evaluate, saved) -> list:
    """Train every (seed, estimator) of `args` in OUT/ESTIMATOR_sSEED (`train_once`: a
    finished run is not trained again), seed-major (a cut-short study has both estimators on
    its first seeds), and append `evaluate(cfg, trained, estimator, seed, args)`;
    `saved(results so far, out)` after each. Every run's config is checked before the first
    one trains: a bad key is one argparse error line."""
    try:
        overrides = parse_overrides(args.set)
        for est in args.estimators:
            train_config(args.config, est, args.seeds[0], Path(args.out), args.steps, overrides)
    except ValueError as e:
        p.error(str(e))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        for est in args.estimators:
            cfg = train_config(
                args.config, est, seed, out / f"{est}_s{seed}", args.steps, overrides
            )
            results.append(evaluate(cfg, train_once(cfg), est, seed, args))
            saved(results, out)
    return results


def main(argv: list[str] | None = None) -> list[RunResult]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    study_arguments(
        p,
        "experiments/reciprocity/train_ipd_aa_causal.yaml",
        [50, 51, 52, 53, 54],
        "runs/reciprocity_causal",
    )
    p.add_argument(
        "--figure",
        default=None,
        help="figure path (default OUT/reciprocity.png; docs/figures/reciprocity.png holds the first setting's study)",
    )
    p.add_argument(
        "--state-gradients",
        action="store_true",
        help="print what each estimator teaches memory-1 policies (no training)",
    )
    p.add_argument(
        "--tabular",
        action="store_true",
        help="train tabular memory-1 policies in self-play with each estimator (no network)",
    )
    p.add_argument(
        "--own-move",
        action="store_true",
        help="with --tabular: states are the last round's two moves (CC, CD, DC, DD), not the other's",
    )
    p.add_argument(
        "--counted",
        action="store_true",
        help="with --tabular: states are how many of the others cooperated last round (0 .. n-1), "
        "not whether all of them did",
    )
    p.add_argument("--iterations", type=int, default=30, help="with --tabular: training iterations")
    p.add_argument(
        "--start",
        nargs="+",
        default=[],
        metavar="STATE=P",
        help="with --tabular: p(C) in a state at iteration 0 (e.g. first=0.9 C=0.9 D=0.1); 0.5 elsewhere",
    )
    p.add_argument(
        "--supervised",
        action="store_true",
        help="fit the config's model to tit-for-tat's replies by cross-entropy: can it read the other's last move?",
    )
    p.add_argument(
        "--save",
        metavar="DIR",
        help="with --supervised: write the fitted model there (a Hugging Face folder: --set model=DIR starts from it)",
    )
    p.add_argument(
        "--graded",
        action="store_true",
        help="with --supervised, in a game of amounts (public goods): fit tit-for-tat in kind, "
        "the least amount another player put in last round",
    )
    p.add_argument(
        "--every-seat",
        action="store_true",
        help="with --supervised: take the examples from every seat in turn (the first seat's only by default)",
    )
    args = p.parse_args(argv)
    if args.state_gradients:
        print(state_gradient_table(args.config, seed=args.eval_seed))
        return []
    if args.tabular:
        try:
            overrides = parse_overrides(args.set)
            table = tabular_table(
                args.config,
                args.iterations,
                seed=args.eval_seed,
                overrides=overrides,
                own_move=args.own_move,
                start=starting_point(args.start),
                counted=args.counted,
            )
        except ValueError as e:
            p.error(str(e))
        print(table)
        return []
    if args.supervised:
        save = Path(args.save) if args.save else None
        rows = supervised_tit_for_tat(
            args.config,
            steps=args.steps or 40,
            save=save,
            graded=args.graded,
            every_seat=args.every_seat,
        )
        for row in rows:
            print(
                f"step {row['step']:3d}  loss {row['loss']:.3f}  P(tit-for-tat's move) by the other's last move: "
                + "  ".join(f"{s} {v:.3f}" for s, v in row["p"].items()),
                flush=True,
            )
        if save is not None:
            print(f"fitted model saved to {save} (a warm start: --set model={save})")
        return []

    def saved(results: list[RunResult], out: Path) -> None:
        r = results[-1]
        print(
            f"{r.estimator} seed {r.seed}: coop with tit_for_tat {r.coop_tft:.2f}, in self-play {r.coop_self:.2f}, "
            f"points vs always_defect {r.payoff_ad:.2f} (mutual defection {r.mutual_defection:g})",
            flush=True,
        )
        (out / "reciprocity.json").write_text(json.dumps([asdict(x) for x in results], indent=1))

    results = run_study(p, args, evaluate, saved)
    out = Path(args.out)
    table = markdown(results)
    (out / "reciprocity.md").write_text(table)
    figure(results, Path(args.figure) if args.figure else out / "reciprocity.png")
    print(table)
    return results


if __name__ == "__main__":
    main()
