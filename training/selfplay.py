"""Self-play RL: `arena train CONFIG [--resume]`, the loop on one screen (`train`).

One policy (an LLM) plays every game of the config, in every seat or against opponents
from a league, and is updated on turn-level advantages::

    build the model, the Learner, a rollout backend that samples from the learner's
    weights, and the league (bots + past snapshots of the policy)
    step 0: evaluate against the fixed eval opponents (greedy, both seats)
    for step in 1..steps:
        pick opponents       a `self_play` share of match pairs: the policy in every seat
                             (from a random opening, or with `games[i].restarts` from a
                             position it lost from: `training.restarts`);
                             the rest: one opponent per pair, drawn by PFSP from the league,
                             in `league.opponent_seats` seats (rotating), the policy in the others
        play                 `arena.runner.play`, the policy's turns batched across matches
        advantages           `training.advantages.compute_advantages` on the policy's turns
                             (and with `games[i].symmetries` their rotated/mirrored images
                             beside them: `training.symmetry`)
        update               `epochs` x `minibatches` PPO steps (`training.learner.Learner`)
        weight sync          transformers: nothing (the backend holds the learner's module);
                             vLLM: `backend.load_weights(learner.policy_state_dict())`
                             Ray rollout workers (config `ray:`): a new policy version
                             through the object store (`training.ray_rollouts`)
        log                  TensorBoard (<run>/tb) + metrics.jsonl + a console line
        every eval.every     `evaluation.run.evaluate` (the module behind `arena eval`): the
                             report set (eval.seed; training and eval.held_out games) -> W/D/L,
                             rates with Wilson 95% CIs per (game, opponent) -> eval.jsonl,
                             eval.png; the selection set (eval.select_seed, training games)
                             -> a new best score puts the policy in <run>/best-pending, which
                             becomes <run>/best once a checkpoint covers it (`run_folder.settle_best`);
                             with eval.exploitability the exact exploitability of the policy
                             on each training game (`periodic_eval.exploitability_at`) -> eval.jsonl,
                             TensorBoard (eval/<game>/exploitability), the curve; with
                             eval.perfect_play each seat's tree walk (`periodic_eval.perfect_play_at`:
                             blunders where the policy reaches, loss to a perfect adversary)
        every league.snapshot_every   a snapshot of the policy joins the league
        every checkpoint_every        an atomic checkpoint (weights, optimizer, RNGs, step,
                                      league, estimator state, restart positions) -> `--resume`
                                      continues exactly

Config: `training.config` (the dataclasses, YAML loading, every check before the model loads).

Run folder (`run_dir`): config.yaml, metrics.jsonl (one line per step), eval.jsonl (one
line per evaluation, game and opponent; `split` train or held_out), eval.png (the curve), tb/ (TensorBoard events),
checkpoints/ (`agents.checkpoint`), league/ (snapshot weights), best/ (the best-evaluated
policy up to the last checkpoint; `llm:<run>/best` plays it, `llm:<run>` the latest checkpoint;
a newer best waits in best-pending/ for the next checkpoint, so a resume never keeps a best
from the steps it replays). One run per folder
(`training.run_folder`): a fresh start refuses checkpoints and sets the files of a run that never
checkpointed aside (old-<time>/); a resume uses the newest intact checkpoint (`checkpoint.resume_point`;
damaged ones go to checkpoints/damaged-step_N/) and cuts the logs back to its step.

Time budget: `max_minutes` counts the wall time of all sessions of a run (the elapsed time
is in every checkpoint). After each step's training the loop checks it (`checkpoint.over_budget`,
before the step's evaluation) and, once spent, evaluates, checkpoints and stops; the checkpoint
keeps the time it checked, so a resume of a run that stopped on its budget trains no step
(it says so), and one resumed from an earlier checkpoint decides on the same time the unbroken run
checked.

Resume and the lr schedule: a cosine schedule's horizon (`learner.total_steps`) is fixed when a
run starts (from its steps); a resume keeps it, so `--resume --steps N` moves only where the run
stops (past the horizon the lr stays at its floor), and says both (`run_folder.schedule_on_resume`).

Metrics: reward (mean env return of the policy's seats), win/draw/loss rates against
league opponents (two-player matches), invalid-move rate and response length of the policy's turns, the PPO
statistics (KL to the behaviour policy and, with a KL term, to the reference; entropy;
clip fraction; means over the step's minibatches, and the first minibatch's alone as
`first_*`: ratio 1, KL and clip fraction 0 up to fp rounding, the on-policy check), rollout
and learner tokens/s.

Exact resume: every random draw of the loop comes from one numpy Generator (match seeds,
sampling seeds, opponent picks) whose state is in the checkpoint with the global RNGs;
rollouts sample from seeded torch generators; evaluation draws nothing from the training
streams. A resumed run therefore repeats the uninterrupted one bit for bit (with bots or
snapshots as opponents, on the same machine and thread count).

Past snapshots as opponents run on the transformers backend (also when the policy's
rollouts use vLLM): every snapshot is kept in memory (a LoRA run keeps its adapters only)
and one frozen copy of the base model plays them all, the snapshot's weights copied in
before its batched call (`Opponents`). One step draws at most `league.max_loaded` distinct
snapshots: each costs one more batched call per round of the step's matches.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from torch.utils.tensorboard import SummaryWriter

from agents import checkpoint
from agents.llm_agent import LLMAgent
from agents.models import load_model
from core.console import make_console
from core.machine import announce_threads, resolve_device, set_threads
from core.progress import Progress
from core.records import MatchRecord
from tournaments.run import stored_ratings
from training.advantages import compute_advantages, learning_samples
from training.config import (  # noqa: F401 (SELF, parse_config: the loop's callers)
    POLICY,
    SELF,
    TrainConfig,
    config_dict,
    load_config,
    parse_config,
)
from training.console_lines import step_line
from training.full_width import FullWidth
from training.league import League, tournament_names
from training.league_tournament import TournamentSetting, play_league_tournament
from training.learner import Learner
from training.periodic_eval import evaluate, exploitability_at, perfect_play_at
from training.plots import plot_eval
from training.ray_rollouts import RayRollouts
from training.restarts import RestartBuffer, lost_positions
from training.rollouts import (  # noqa: F401 (save_snapshot, start_league: the loop's callers)
    Opponents,
    plan_step,
    play_step,
    save_snapshot,
    start_league,
    step_agents,
    step_lineup,
)
from training.run_folder import (
    append_row,
    prepare_run_dir,
    release_run_dir,
    resume_from,
    schedule_line,
    schedule_on_resume,
    settle_best,
    truncate_after,
)
from training.sections import Matches, PolicyModel
from training.sequences import TrainingSequence, sequences_from_samples
from training.setup import (  # noqa: F401 (seed_everything: the loop's callers)
    behaviour_recompute,
    make_backend,
    seed_everything,
    sync_weights,
)
from training.step_metrics import league_scores, rollout_metrics
from training.symmetry import symmetric_sequences

# --- the loop -----------------------------------------------------------------------------


def train(
    cfg: TrainConfig, resume: bool = False, console=None, horizon_given: bool = False
) -> dict:
    """Run (or resume) training; returns {"step", "elapsed", "games", "eval": last eval rows}.

    A resume keeps the lr schedule's horizon the run started with (`schedule_on_resume`; `cfg.steps`
    says only where it stops) unless `horizon_given`: cfg's learner.total_steps was set explicitly.
    """
    try:  # the run folder is this process's from set_up until the run ends (`hold_run_dir`)
        run = set_up(cfg, resume, console or make_console(highlight=False), horizon_given)
        evaluate_before_training(run)
        step = run.start_step
        for step in range(run.start_step + 1, run.cfg.steps + 1 if not run.spent else 0):
            t0 = time.perf_counter()
            if run.full_width is not None:  # no matches: exact values over the game's whole tree
                m, work = full_width_step(run)
            else:
                played = collect(run, step, t0)  # 1. matches: self-play pairs and league opponents
                m, work = update(run, step, played)  # 2. advantages -> sequences -> PPO updates
            run.elapsed += time.perf_counter() - t0
            add_step_figures(run, step, m, work)
            if after_step(run, step, m):  # 3. evaluation, league snapshot, checkpoint
                break
        return finish(run, step)
    finally:
        release_run_dir(Path(cfg.run_dir))


@dataclass
class Run:
    """A training run in progress: what `set_up` built and the state a checkpoint keeps."""

    cfg: TrainConfig
    console: Any
    resume: bool
    policy: PolicyModel
    matches: Matches
    learner: Learner
    tokenizer: Any
    backend: Any
    rng: np.random.Generator
    league: League
    restarts: RestartBuffer
    images: dict  # symmetric images per learning turn, by game
    positive_images: frozenset
    adv_state: dict = field(default_factory=dict)
    start_step: int = 0
    elapsed: float = 0.0
    games_played: int = 0
    best: float = -1.0
    # the elapsed time the time rule checked at the last step (before its evaluation)
    budget_elapsed: float = 0.0
    spent: bool = False  # a resumed run stopped on its time budget: no step more
    opponents: Opponents | None = None
    full_width: FullWidth | None = None
    rollouts: RayRollouts | None = None
    writer: Any = None
    last_eval: list[dict] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.run_dir)


@dataclass
class Collected:
    """A step's played matches: the records (by match id), each one's league opponent (None in
    self-play), the rollout seconds and the policy's tokens."""

    records: list[MatchRecord]
    opponents: list[str | None]
    seconds: float
    tokens: int


@dataclass
class StepWork:
    """How long a step's rollouts and learning took, and how many tokens each handled."""

    rollout_seconds: float
    learn_seconds: float
    rollout_tokens: int
    learn_tokens: int


# --- set up ---------------------------------------------------------------------------------


def set_up(cfg: TrainConfig, resume: bool, console, horizon_given: bool) -> Run:
    """Ready the run folder, build the model, learner, rollout backend and league, resume when
    there is a checkpoint, and start the opponents, full-width tables, Ray workers and TensorBoard."""
    run_dir = Path(cfg.run_dir)
    resume = prepare_run_dir(run_dir, resume, console.print)
    if resume:
        learner_cfg = schedule_on_resume(
            cfg.learner, run_dir / "checkpoints", horizon_given, console.print
        )
        if learner_cfg is not cfg.learner:
            cfg = replace(cfg, learner=learner_cfg)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config_dict(cfg), sort_keys=False))
    set_threads(cfg.threads, verbose=False)
    announce_threads(console.print)  # in the run's log, not as an error line
    run = build_run(cfg, console, resume)
    if resume:
        resume_run(run, horizon_given)
    run.spent = resume and checkpoint.over_budget(run.budget_elapsed, cfg.max_minutes)
    if run.spent and run.start_step < cfg.steps:
        console.print(
            f"time budget spent: max_minutes {cfg.max_minutes:g} was reached at step {run.start_step}; no step trained "
            "(raise max_minutes to train on)"
        )
    if (
        cfg.league.ratings
    ):  # read at every start and resume: a tournament played meanwhile informs the rest of the run
        elo, stands_for = tournament_names(stored_ratings(cfg.league.ratings))
        run.league.use_ratings(elo, stands_for)
        console.print(
            f"league: PFSP from the ratings in {cfg.league.ratings} ({len(elo)} players, {stands_for} stands for the policy)"
        )
    start_components(run)
    return run


def build_run(cfg: TrainConfig, console, resume: bool) -> Run:
    """The model, learner, rollout backend, the loop's generator and a fresh league."""
    policy = PolicyModel.of(cfg)
    seed_everything(cfg.seed)  # LoRA init draws from torch
    # fp32 master weights (built on the host when the learner keeps them there); the learner
    # computes in a bf16 copy on the device when learner.precision says so
    device = resolve_device(cfg.device)
    master_device = "cpu" if cfg.learner.offload_optimizer else device
    model, tokenizer = load_model(cfg.model, dtype="float32", device=master_device)
    learner = Learner(model, tokenizer, cfg.learner, device=device, roles=policy.roles)
    backend = make_backend(policy, learner, tokenizer)
    # again: an in-process vLLM engine reseeds the global RNGs at start-up
    rng = seed_everything(cfg.seed)
    return Run(
        cfg,
        console,
        resume,
        policy,
        Matches.of(cfg),
        learner,
        tokenizer,
        backend,
        rng,
        start_league(cfg.league),
        RestartBuffer({g.name: g.restart_buffer for g in cfg.games}),
        images={g.name: g.symmetries for g in cfg.games if g.symmetries},
        positive_images=frozenset(g.name for g in cfg.games if g.symmetry_advantages == "positive"),
    )


def resume_run(run: Run, horizon_given: bool) -> None:
    """Load the newest intact checkpoint into `run` and cut the run folder back to its step."""
    run_dir = run.run_dir
    (
        run.start_step,
        run.league,
        run.adv_state,
        run.elapsed,
        run.games_played,
        run.best,
        run.budget_elapsed,
        restart_state,
    ) = resume_from(run_dir / "checkpoints", run.learner, run.rng, run.console.print)
    run.restarts.load_state_dict(restart_state)
    sync_weights(run.learner, run.backend)
    for name in ("metrics.jsonl", "eval.jsonl"):
        truncate_after(run_dir / name, run.start_step)
    settle_best(run_dir, run.start_step, run.console.print)
    run.console.print(
        f"resumed {run_dir} at step {run.start_step} ({run.games_played} games, {run.elapsed / 60:.1f} min); "
        f"this run stops at step {run.cfg.steps}; {_schedule(run.cfg, kept=not horizon_given)}"
    )


def start_components(run: Run) -> None:
    """The league's opponents, the full-width tables, the Ray workers and TensorBoard; says what trains."""
    cfg, learner, console = run.cfg, run.learner, run.console
    run.opponents = Opponents(run.policy, cfg.games, learner.device)
    if cfg.full_width.enabled:
        agent = LLMAgent(POLICY, run.backend, replace(cfg.agent, seed=cfg.seed))
        run.full_width = FullWidth(
            cfg.full_width, cfg.games, cfg.seed, cfg.learner.loss.aggregation, agent, run.tokenizer
        )
        console.print(
            f"full width: {run.full_width.sequences} move sequences over "
            + ", ".join(f"{t.name} ({t.size} {t.rows_named})" for t in run.full_width.tables)
            + "; no matches are played"
        )
    if cfg.ray.address:
        run.rollouts = RayRollouts.start(
            cfg.ray, run.policy, run.matches, cfg.league, learner, run.start_step
        )
        console.print(
            f"ray: {len(run.rollouts.pool.workers)} rollout worker(s) at {cfg.ray.address}, max_staleness {cfg.ray.max_staleness}; "
            f"weight sync {run.rollouts.sync_bytes / 1e6:.1f} MB per step"
        )
    run.writer = SummaryWriter(
        str(run.run_dir / "tb"), purge_step=run.start_step + 1 if run.resume else None
    )
    n_params = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    console.print(
        f"training {cfg.model} ({n_params / 1e6:.1f}M trainable) on {', '.join(g.name for g in cfg.games)}; "
        f"run dir {run.run_dir}; steps {run.start_step}->{cfg.steps}; {_schedule(cfg)}"
    )


def _schedule(cfg: TrainConfig, kept: bool = False) -> str:
    return schedule_line(cfg.learner, cfg.epochs * cfg.minibatches, cfg.steps, kept=kept)


def evaluate_before_training(run: Run) -> None:
    """Step 0's evaluation (and checkpoint with `checkpoint_initial`) of a fresh run; a resume
    from a step-0 checkpoint has its evaluation."""
    if run.start_step == 0 and not run.resume:
        t0 = time.perf_counter()
        run.last_eval = evaluation_point(run, 0)
        run.elapsed += time.perf_counter() - t0
        run.console.print(step_line(0, {}, run.last_eval))
        if run.cfg.checkpoint_initial:
            save_checkpoint(run, 0)


# --- one step -------------------------------------------------------------------------------


def full_width_step(run: Run) -> tuple[dict, StepWork]:
    """A full-width step (`training.full_width`): exact values over the whole tree, no matches."""
    t1 = time.perf_counter()
    m = run.full_width.step(run.learner, run.adv_state)
    sync_weights(run.learner, run.backend)
    learn_tokens = run.full_width.tokens * run.cfg.full_width.fit_steps
    return m, StepWork(0.0, time.perf_counter() - t1, 0, learn_tokens)


def collect(run: Run, step: int, t0: float) -> Collected:
    """Step `step`'s matches, played here or by the Ray workers; records their results in the
    league and their lost positions in the restart buffer. `t0`: when the step started."""
    cfg = run.cfg
    if run.rollouts is None:
        planned, records = play_locally(run, step)
    else:  # Ray workers; with max_staleness 1 this step's matches were started during the last update
        planned, records = run.rollouts.collect(step, run.league, run.rng, run.restarts)
    by_id = {p.match_id: opp for p, opp in planned}
    match_opps = [by_id[r.match_id] for r in records]
    for rec, opp in zip(records, match_opps):
        if opp is not None and rec.error is None:
            for score in league_scores(rec, POLICY):
                run.league.record(opp, score)
    if any(g.restarts for g in cfg.games):
        league_only = {g.name for g in cfg.games if g.restart_from == "league"}
        kept = [
            r for r, o in zip(records, match_opps) if o is not None or r.game not in league_only
        ]
        run.restarts.add(lost_positions(kept, POLICY))
    if run.rollouts is not None and cfg.ray.max_staleness and step < cfg.steps:
        # on the current weights, while the learner updates
        run.rollouts.start_step(step + 1, run.league, run.rng, run.restarts)
    t_roll = time.perf_counter() - t0
    tokens = sum(
        len(t.prompt_token_ids) + len(t.token_ids)
        for r in records
        for t in r.turns
        if t.agent == POLICY
    )
    run.games_played += len(records)
    return Collected(records, match_opps, t_roll, tokens)


def play_locally(run: Run, step: int) -> tuple[list, list[MatchRecord]]:
    """Plan step `step`'s matches (self-play pairs and PFSP-drawn league opponents) and play them here."""
    planned = plan_step(run.matches, run.cfg.league, run.league, run.rng, step, run.restarts)
    run.opponents.refresh_exploiters(run.league, run.backend, step)
    lineup = step_lineup(run.league, planned, run.rng)
    agents = step_agents(run.cfg.agent, run.backend, run.opponents, lineup)
    with Progress(
        total=len(planned), desc=f"step {step} rollout", leave=False
    ) as bar:  # the step's line follows
        records = play_step(planned, agents, run.matches, progress=bar)
    for rec in records:
        rec.policy_version = step - 1
    return planned, records


def update(run: Run, step: int, played: Collected) -> tuple[dict, StepWork]:
    """Advantages of the policy's turns, their sequences, the PPO updates; the step's metrics."""
    t1 = time.perf_counter()
    seqs = learning_sequences(run, played.records)
    m = rollout_metrics(played.records, played.opponents)
    if seqs:
        m.update(ppo_updates(run, seqs))
        sync_weights(run.learner, run.backend)
    else:
        run.console.print(
            f"step {step}: no policy turns to learn from (all matches aborted?); no update"
        )
    if run.rollouts is not None:
        run.rollouts.publish(run.learner, step)  # version `step`: what the workers play next
    t_learn = time.perf_counter() - t1
    learn_tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in seqs) * run.cfg.epochs
    m["samples"] = float(len(seqs))
    return m, StepWork(played.seconds, t_learn, played.tokens, learn_tokens)


def learning_sequences(run: Run, records: list[MatchRecord]) -> list[TrainingSequence]:
    """The learner's sequences of the policy's turns with their advantages (and their
    symmetric images with `games[i].symmetries`)."""
    cfg, learner = run.cfg, run.learner
    extra = {}
    if (
        cfg.advantage.estimator == "critic"
    ):  # the value head's estimates of every learning turn first
        turns = learning_samples(records, cfg.advantage)
        values = learner.values(sequences_from_samples(turns, run.tokenizer)) if turns else []
        extra["values"] = {(t.match_index, t.turn_index): v for t, v in zip(turns, values)}
    roles = run.policy.seat_roles or None
    if roles and cfg.advantage.estimator == "mars":  # agent-specific normalisation per role
        extra["norm_groups"] = roles
    samples = compute_advantages(records, cfg.advantage, run.adv_state, **extra)
    seqs = sequences_from_samples(
        samples, run.tokenizer, recompute=behaviour_recompute(run.policy, learner), roles=roles
    )
    if run.images:
        seqs += symmetric_sequences(
            samples, run.images, run.tokenizer, run.rng, run.positive_images
        )
    return seqs


def ppo_updates(run: Run, seqs: list[TrainingSequence]) -> dict[str, float]:
    """`epochs` x `minibatches` learner steps on `seqs`; their statistics (means, the ratio's
    range, and the first minibatch's alone as `first_*`)."""
    cfg, learner = run.cfg, run.learner
    if cfg.epochs * cfg.minibatches > 1:
        learner.prepare(seqs)  # freeze behaviour logprobs before the first update
    stats: dict[str, list[float]] = defaultdict(list)
    for _ in range(cfg.epochs):
        order = run.rng.permutation(len(seqs)) if cfg.minibatches > 1 else np.arange(len(seqs))
        for chunk in np.array_split(order, cfg.minibatches):
            if len(chunk):
                for k, v in learner.step([seqs[i] for i in chunk]).items():
                    stats[k].append(v)
    m = {k: float(np.mean(v)) for k, v in stats.items()}
    m["ratio_min"], m["ratio_max"] = min(stats["ratio_min"]), max(stats["ratio_max"])
    # the on-policy check: the first minibatch is scored by the policy that played, so its ratio is 1
    # and nothing clips (to fp rounding); the figures above also hold the later minibatches, which
    # follow updates (step 1's first Adam update, lr x sign(gradient) on every weight, is the largest)
    m.update(
        {
            f"first_{k}": stats[k][0]
            for k in ("ratio_min", "ratio_max", "approx_kl_behaviour", "clip_frac")
        }
    )
    return m


def add_step_figures(run: Run, step: int, m: dict, work: StepWork) -> None:
    """The step's times and throughputs into `m`; the league's PFSP weights to TensorBoard."""
    m.update(
        rollout_seconds=work.rollout_seconds,
        learn_seconds=work.learn_seconds,
        step_seconds=work.rollout_seconds + work.learn_seconds,
        rollout_tokens_per_s=work.rollout_tokens / max(work.rollout_seconds, 1e-9),
        learn_tokens_per_s=work.learn_tokens / max(work.learn_seconds, 1e-9),
        games=float(run.games_played),
        minutes=run.elapsed / 60,
    )
    league = run.league
    for name, p in league.probabilities().items() if league.opponents else []:
        run.writer.add_scalar(f"league/p/{name}", p, step)
        run.writer.add_scalar(f"league/win_rate/{name}", league.win_rate(name), step)


# --- after the step -------------------------------------------------------------------------


def after_step(run: Run, step: int, m: dict) -> bool:
    """Evaluation, league snapshot and tournament, logs, checkpoint; True when this was the run's
    last step (its steps or its time budget are spent)."""
    cfg = run.cfg
    run.budget_elapsed = run.elapsed
    last = step == cfg.steps or checkpoint.over_budget(run.elapsed, cfg.max_minutes)
    ev = []
    if cfg.eval.every and (step % cfg.eval.every == 0 or last):
        t2 = time.perf_counter()
        ev = run.last_eval = evaluation_point(run, step)
        run.elapsed += time.perf_counter() - t2
    if cfg.league.snapshot_every and step % cfg.league.snapshot_every == 0:
        take_snapshot(run, step)
    if cfg.league.tournament.every and step % cfg.league.tournament.every == 0:
        t3 = time.perf_counter()
        league_tournament(run, step)
        run.elapsed += time.perf_counter() - t3
    append_row(run.run_dir / "metrics.jsonl", {"step": step, **m})
    for k, v in m.items():
        run.writer.add_scalar(f"train/{k}", v, step)
    if step % cfg.log_every == 0 or ev:
        run.console.print(step_line(step, m, ev))
    if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or last:
        save_checkpoint(run, step)
    return last


def evaluation_point(run: Run, step: int) -> list[dict]:
    """Evaluate the policy at `step` (`training.periodic_eval`): a new best selection score puts
    it in best-pending/; the rows go to eval.jsonl, TensorBoard and eval.png."""
    cfg, backend = run.cfg, run.backend
    if not cfg.eval.every:
        return []
    rows, score = evaluate(cfg.eval, cfg.agent, run.matches, backend, step)
    if score > run.best:
        run.best = score
        checkpoint.save_policy(
            run.run_dir / "best-pending",
            run.learner,
            step,
            config=config_dict(cfg),
            selection_score=score,
            eval=rows,
        )
    for r in rows:
        r.update(minutes=run.elapsed / 60, train_games=run.games_played, selection_score=score)
        append_row(run.run_dir / "eval.jsonl", r)
        split = "eval" if r["split"] == "train" else "eval_held_out"
        tag = f"{split}/{r['game']}/{r['opponent']}"
        for key in ("non_losing", "mean_return", "rank"):  # a ranked game has no non-losing rate
            if r.get(key) is not None:
                run.writer.add_scalar(f"{tag}/{key}", r[key], step)
    for r in exploitability_at(cfg.eval, cfg.agent, cfg.games, backend, step):
        kind = "nash_conv" if r["exploitability"] is None else "exploitability"
        rows.append(_log_analysis_row(run, r, {f"eval/{r['game']}/{kind}": r[kind]}, step))
    for r in perfect_play_at(cfg.eval, cfg.agent, cfg.games, backend, step):
        scalars = {
            f"eval/{r['game']}/blunders_seat{r['seat']}": r["blunders"],
            f"eval/{r['game']}/adversary_loss_seat{r['seat']}": r["adversary_loss"],
        }
        rows.append(_log_analysis_row(run, r, scalars, step))
    if score >= 0:
        run.writer.add_scalar("eval/selection_score", score, step)
    if rows:
        plot_eval(run.run_dir)
    return rows


def _log_analysis_row(run: Run, r: dict, scalars: dict[str, float], step: int) -> dict:
    """An exploitability or perfect-play row to eval.jsonl, its `scalars` to TensorBoard."""
    r.update(minutes=run.elapsed / 60, train_games=run.games_played)
    append_row(run.run_dir / "eval.jsonl", r)
    for tag, value in scalars.items():
        run.writer.add_scalar(tag, value, step)
    return r


def take_snapshot(run: Run, step: int) -> None:
    """A snapshot of the policy joins the league; the files of snapshots that left it go."""
    folder = run.run_dir / "league"
    path = folder / f"step_{step:08d}.safetensors"
    save_snapshot(run.learner, path)
    run.league.add(f"ckpt-{step}", "checkpoint", str(path))
    kept = {o.spec for o in run.league.opponents}
    run.opponents.forget(kept)
    for f in folder.glob("*.safetensors"):
        if str(f) not in kept:
            f.unlink()


def league_tournament(run: Run, step: int) -> None:
    """Step `step`'s league tournament (`training.league_tournament`): its Elo sets the PFSP weights."""
    cfg = run.cfg
    setting = TournamentSetting(
        cfg.league.tournament, run.matches, cfg.agent, cfg.run_dir, cfg.seed
    )
    elo = play_league_tournament(setting, run.league, step, run.backend, run.opponents)
    if elo is None:
        return
    run.league.use_ratings(elo, POLICY)
    for name, r in elo.items():
        run.writer.add_scalar(f"league/elo/{name}", r, step)
    run.console.print(
        f"step {step:>4}  league tournament ({cfg.league.tournament.format}, {len(elo)} players): policy {elo[POLICY]:.0f} Elo; "
        + ", ".join(
            f"{n} {r:.0f}" for n, r in sorted(elo.items(), key=lambda kv: -kv[1]) if n != POLICY
        )
    )


def save_checkpoint(run: Run, step: int) -> None:
    """An atomic checkpoint of step `step` (`agents.checkpoint.save`); then best/ catches up."""
    state = {
        "advantage": run.adv_state,
        "elapsed": run.elapsed,
        "games": run.games_played,
        "best": run.best,
        "budget_elapsed": run.budget_elapsed,
        "restarts": run.restarts.state_dict(),
    }
    checkpoint.save(
        run.run_dir / "checkpoints",
        run.learner,
        step,
        config=config_dict(run.cfg),
        league=run.league.state_dict(),
        state=state,
        rng=run.rng,
        keep=run.cfg.keep_checkpoints,
    )
    settle_best(run.run_dir, step, run.console.print)


def finish(run: Run, step: int) -> dict:
    """Close TensorBoard, the Ray workers and the backend; the run's result."""
    run.writer.close()
    if run.rollouts is not None:
        run.rollouts.shutdown()
    if hasattr(
        run.backend, "close"
    ):  # a vLLM engine holds its KV cache (a share of RAM) until closed
        run.backend.close()
    if run.best >= 0 and run.cfg.eval.keep_best:
        run.console.print(
            f"best selection score (mean non-losing on the selection matches): {run.best:.3f}, policy in {run.run_dir / 'best'}"
        )
    return {
        "step": step,
        "elapsed": run.elapsed,
        "games": run.games_played,
        "eval": run.last_eval,
        "best": run.best,
    }
