"""Self-play RL: `arena train CONFIG [--resume]`, the whole loop in one file.

One policy (an LLM) plays every game of the config, in every seat or against opponents
from a league, and is updated on turn-level advantages::

    build the model, the Learner, a rollout backend that samples from the learner's
    weights, and the league (bots + past snapshots of the policy)
    step 0: evaluate against the fixed eval opponents (greedy, both seats)
    for step in 1..steps:
        pick opponents       a `self_play` share of match pairs: the policy in every seat
                             (from a random opening, or with `games[i].restarts` from a
                             position it lost from: `training.restarts`);
                             the rest: one opponent per pair, drawn by PFSP from the league
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
                             becomes <run>/best once a checkpoint covers it (`settle_best`);
                             with eval.exploitability the exact exploitability of the policy
                             on each training game (`exploitability_rows`) -> eval.jsonl,
                             TensorBoard (eval/<game>/exploitability), the curve; with
                             eval.perfect_play each seat's tree walk (`perfect_play_rows`:
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
(`prepare_run_dir`): a fresh start refuses checkpoints and sets the files of a run that never
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
stops (past the horizon the lr stays at its floor), and says both (`schedule_on_resume`).

Metrics: reward (mean env return of the policy's seats), win/draw/loss rates against
league opponents, invalid-move rate and response length of the policy's turns, the PPO
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

import json
import os
import random
import shutil
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import yaml
from torch.utils.tensorboard import SummaryWriter

from agents import checkpoint
from agents.llm_agent import LLMAgent
from agents.models import load_model
from agents.transformers_backend import TransformersBackend
from core.console import make_console
from core.machine import announce_threads, resolve_device, set_threads
from core.progress import Progress
from core.records import MatchRecord, check_writable, read_json_lines
from evaluation.exact_vs_random import PolicyTable
from evaluation.exploitability import exploitability
from evaluation.metrics import summary
from evaluation.perfect_play import perfect_play
from evaluation.run import evaluate as play_and_score
from evaluation.suites import plans
from tournaments.run import stored_ratings
from training.advantages import compute_advantages, learning_samples
from training.config import (  # noqa: F401 (SELF, parse_config: the loop's callers)
    POLICY,
    SELF,
    TrainConfig,
    config_dict,
    eval_games,
    load_config,
    parse_config,
)
from training.full_width import FullWidth
from training.league import League, tournament_names
from training.league_tournament import play_league_tournament
from training.learner import Learner
from training.plots import plot_eval
from training.ray_rollouts import RayRollouts
from training.restarts import RestartBuffer, lost_positions
from training.rollouts import (
    Opponents,
    plan_step,
    play_step,
    save_snapshot,
    start_league,
    step_agents,
    step_lineup,
)
from training.sequences import sequences_from_samples
from training.symmetry import symmetric_sequences

# --- seeds, backends, metrics and evaluation -----------------------------------------------


def seed_everything(seed: int) -> np.random.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def make_backend(cfg: TrainConfig, learner: Learner, tokenizer):
    """The rollout backend: in-process transformers on the learner's module, or a vLLM engine."""
    if cfg.backend == "transformers":
        kwargs = {"max_batch_size": 256, **cfg.backend_kwargs}
        return TransformersBackend((learner.policy, tokenizer), name=POLICY, **kwargs)
    from agents.vllm_backend import VLLMBackend  # optional: vllm

    kwargs = dict(cfg.backend_kwargs)
    if "max_batch_size" in kwargs:  # the shared option's vLLM name
        kwargs["max_num_seqs"] = kwargs.pop("max_batch_size")
    # the learner's dtype unless set (the rollout numerics then match the learner's as closely as vLLM can);
    # prefix caching: a step's prompts share the game's rules, and each match its own history
    kwargs = {"dtype": learner.compute_dtype, "enable_prefix_caching": True, **kwargs}
    return VLLMBackend(cfg.model, name=POLICY, **kwargs)


def behaviour_recompute(cfg: TrainConfig, learner: Learner) -> str:
    """Which recorded behaviour logprobs the learner replaces with its own (`sequences_from_samples`).

    In bf16 the rollouts and the learner's passes round differently even on the same weights:
    a decode step's kernels and KV cache against one forward pass over the padded batch (SmolLM2-135M's
    recorded and recomputed logprobs of one batch differed by up to 0.44 nats, mean 0.05; a
    vLLM engine's bf16 kernels move the first ratio further: `bench/vllm_training_step.py --numerics`), so the learner
    recomputes them all whenever it or a vLLM engine computes in bf16 (free with one epoch and
    one minibatch: the first update's own logprobs, detached; one more forward pass otherwise).
    fp32 on both sides agrees to ~1e-5: then only constrained turns are recomputed.
    """
    engine_dtype = cfg.backend_kwargs.get("dtype", learner.compute_dtype)
    if learner.compute_dtype != "float32" or (cfg.backend == "vllm" and engine_dtype != "float32"):
        return "all"
    return "constrained"


def sync_weights(learner: Learner, backend) -> None:
    """Make the rollout backend sample from the learner's current weights."""
    if getattr(backend, "model", None) is learner.policy:
        return  # in-process transformers: the same module, already updated in place
    if not hasattr(backend, "load_weights"):
        raise RuntimeError(
            f"backend {getattr(backend, 'name', type(backend).__name__)} neither shares the learner's module nor has load_weights"
        )
    backend.load_weights(learner.policy_state_dict())


def _score(rec: MatchRecord, agent: str) -> list[str]:
    """Outcomes of `agent`'s seats in a match."""
    return [rec.outcome.get(p, "draw") for p, a in rec.seats.items() if a == agent]


def rollout_metrics(records: list[MatchRecord], opponents: list[str | None]) -> dict[str, float]:
    """Reward, results against opponents, invalid-move rate and response length of the policy."""
    returns, results = [], []
    turns = invalid = tokens = 0
    for rec, opp in zip(records, opponents):
        for p, a in rec.seats.items():
            if a == POLICY:
                returns.append(rec.returns.get(p, 0.0))
        if opp is not None:
            results += _score(rec, POLICY)
        for t in rec.turns:
            if t.agent == POLICY:
                turns += 1
                invalid += not t.valid
                tokens += len(t.token_ids)
    m = {
        "reward": float(np.mean(returns)) if returns else 0.0,
        "invalid_rate": invalid / max(1, turns),
        "response_length": tokens / max(1, turns),
        "policy_turns": float(turns),
        "aborted": float(sum(r.error is not None for r in records)),
    }
    if results:
        m.update(
            win_rate=results.count("win") / len(results),
            draw_rate=results.count("draw") / len(results),
            loss_rate=results.count("loss") / len(results),
        )
    return m


def evaluate(cfg: TrainConfig, backend, step: int) -> tuple[list[dict], float]:
    """One evaluation point through `evaluation.run.evaluate` (policy greedy unless
    eval.temperature > 0): the report rows (one per (game, opponent), training and held-out
    games, eval.seed) and the selection score (mean non-losing rate over the training games'
    selection matches, eval.select_seed; -1 without keep_best)."""
    train_games, held_out = eval_games(cfg)

    def cells(games_, matches: int, seed: int, what: str):
        policy = LLMAgent(
            POLICY, backend, replace(cfg.agent, temperature=cfg.eval.temperature, seed=seed)
        )
        with Progress(
            total=len(plans(POLICY, games_, matches, seed)),
            desc=f"eval step {step} ({what})",
            leave=False,
        ) as bar:
            return play_and_score(
                policy,
                games_,
                matches,
                seed,
                name=POLICY,
                concurrency=cfg.concurrency,
                max_turns=cfg.max_turns,
                progress=bar,
            )

    held = {g.name for g in held_out}
    rows = [
        {"step": step, "split": "held_out" if r["game"] in held else "train", **r}
        for r in summary(cells(train_games + held_out, cfg.eval.games, cfg.eval.seed, "report"))
    ]
    score = -1.0
    if cfg.eval.keep_best and train_games:
        chosen = summary(
            cells(
                train_games,
                cfg.eval.select_games or cfg.eval.games,
                cfg.eval.select_seed,
                "selection",
            )
        )
        score = float(np.mean([r["non_losing"] for r in chosen]))
    return rows, score


def distinct_games(cfg: TrainConfig) -> list:
    """The training games, each (name, params) once."""
    out, seen = [], set()
    for g in cfg.games:
        key = (g.name, json.dumps(g.params, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def exploitability_rows(cfg: TrainConfig, backend, step: int) -> list[dict]:
    """The exact exploitability of the policy as it plays in training (`cfg.agent`, at its
    sampling temperature: what `arena eval --agent llm:RUN --exploitability` scores) on each
    training game, one eval.jsonl row per game (kind "exploitability"); none without
    `eval.exploitability`.

    Args:
        cfg: the run's config.
        backend: the rollout backend holding the current weights.
        step: the evaluation point's step.

    Returns:
        Rows {"step", "split", "kind", "game", "exploitability", "nash_conv", "method", "states", "seconds"}.
    """
    if not cfg.eval.exploitability:
        return []
    policy = LLMAgent(POLICY, backend, replace(cfg.agent, seed=cfg.eval.seed))
    rows = []
    for g in distinct_games(cfg):
        r = exploitability(policy, g.name, g.params, seed=cfg.eval.seed, name=POLICY)
        rows.append(
            {
                "step": step,
                "split": "train",
                "kind": "exploitability",
                "game": g.name,
                "exploitability": r.exploitability,
                "nash_conv": r.nash_conv,
                "method": r.method,
                "states": r.states,
                "seconds": r.seconds,
            }
        )
    return rows


def perfect_play_rows(cfg: TrainConfig, backend, step: int) -> list[dict]:
    """Each seat's tree walk of the policy at the evaluation temperature (greedy by default:
    what `python -m evaluation.perfect_play llm:RUN` scores) on each training game, one
    eval.jsonl row per (game, seat) (kind "perfect_play"); none without `eval.perfect_play`.

    Args:
        cfg: the run's config.
        backend: the rollout backend holding the current weights.
        step: the evaluation point's step.

    Returns:
        Rows {"step", "split", "kind", "game", "seat", "positions", "blunders", "blunder_mass",
        "adversary_return", "adversary_loss", "seconds"}.
    """
    if not cfg.eval.perfect_play:
        return []
    agent_cfg = replace(cfg.agent, seed=cfg.eval.seed, temperature=cfg.eval.temperature)
    policy = LLMAgent(POLICY, backend, agent_cfg)
    rows = []
    for g in distinct_games(cfg):
        t0 = time.perf_counter()
        table = PolicyTable(policy, g.name, g.params)
        walked = [perfect_play(table, seat) for seat in (0, 1)]
        seconds = time.perf_counter() - t0
        for r in walked:
            rows.append(
                {
                    "step": step,
                    "split": "train",
                    "kind": "perfect_play",
                    "game": g.name,
                    "seat": r.seat,
                    "positions": r.positions,
                    "blunders": r.blunders,
                    "blunder_mass": r.blunder_mass,
                    "adversary_return": r.adversary_return,
                    "adversary_loss": r.adversary_loss,
                    "seconds": seconds,
                }
            )
    return rows


def _append(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _truncate_after(path: Path, step: int) -> None:
    """Keep the lines of steps up to `step`: a run killed after its last checkpoint wrote more (and maybe a torn line)."""
    if path.exists():
        rows = [r for r in read_json_lines(path) if r["step"] <= step]
        tmp = checkpoint.tmp_path(path)
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        os.replace(tmp, path)


# --- the run folder -------------------------------------------------------------------------

RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "eval.jsonl",
    "eval.png",
    "tb",
    "league",
    "tournaments",
    "best",
    "best-pending",
    "checkpoints",
)  # what a run writes


def _free(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`... if taken."""
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out


def _check_writable(run_dir: Path) -> None:
    """ValueError "cannot write to DIR" unless the run folder and what a run writes in it can be written."""
    check_writable(run_dir / RUN_FILES[0])  # makes the folder, probes it with a new file
    check_writable(run_dir, *(run_dir / n for n in RUN_FILES if (run_dir / n).exists()))


def prepare_run_dir(run_dir: Path, resume: bool, say) -> bool:
    """Ready `run_dir` before anything heavy starts; True when there is a checkpoint to resume from.

    "cannot write to DIR" when it cannot be written. Removes the temp files of killed
    writers. A fresh start refuses a folder with checkpoints; the files of a run that never
    reached its first checkpoint (fresh start or --resume) are set aside in old-<time>/, so
    the logs of two runs never mix.
    """
    _check_writable(run_dir)
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "league"):
        checkpoint.clean_tmp(folder)
    if checkpoint.checkpoints(run_dir / "checkpoints"):
        if not resume:
            raise ValueError(
                f"{run_dir} already holds checkpoints: pass --resume to continue, or choose another run_dir (--out)"
            )
        return True
    if resume:
        say(f"--resume: no checkpoint in {run_dir / 'checkpoints'}; starting fresh")
    present = [run_dir / n for n in RUN_FILES if (run_dir / n).exists()]
    if any(p.name != "config.yaml" and not (p.is_dir() and not any(p.iterdir())) for p in present):
        aside = _free(run_dir / f"old-{time.strftime('%Y%m%d-%H%M%S')}")
        aside.mkdir()
        for p in present:
            os.replace(p, aside / p.name)
        say(
            f"{run_dir} held the files of a run that never reached a checkpoint: moved them to {aside}"
        )
    return False


def resume_from(
    ckpt_dir: Path, learner: Learner, rng: np.random.Generator, say
) -> tuple[int, League, dict, float, int, float, float, list]:
    """Load the newest intact checkpoint (`checkpoint.resume_point`): its `checkpoint.run_state`.

    A checkpoint with a damaged file is skipped (and moved to damaged-step_N, saying why);
    ValueError when none is intact.
    """
    folder, skipped = checkpoint.resume_point(ckpt_dir)
    if folder is None:
        raise ValueError(
            f"--resume: no intact checkpoint in {ckpt_dir}: "
            + "; ".join(str(e) for _, e in skipped)
        )
    for bad, e in skipped:
        aside = _free(bad.with_name(f"damaged-{bad.name}"))
        os.replace(bad, aside)
        say(
            f"skipped checkpoint {bad.name}: {e}; moved it to {aside.name}; resuming from {folder.name}"
        )
    step, league, *rest = checkpoint.run_state(checkpoint.load(folder, learner, rng=rng), folder)
    try:
        league = League.from_state_dict(league)
    except (KeyError, TypeError, ValueError) as e:
        raise checkpoint.DamagedCheckpoint(
            f"checkpoint file {folder / 'meta.json'} is damaged (its league state: {type(e).__name__} {e})"
        ) from None
    return (step, league, *rest)


def settle_best(run_dir: Path, step: int, say) -> None:
    """Make best/ the best policy evaluated up to checkpoint `step`.

    A new best is written to best-pending/ and becomes best/ only when a checkpoint covers its
    step (here, right after the checkpoint is saved). A resume from checkpoint k calls this
    too: a pending best from a step after k belongs to steps the run replays (it was killed
    after that evaluation and before its next checkpoint), so it is dropped; the replay
    finds its own. best/ therefore never holds a policy from a step the run replays.
    """
    pending = run_dir / "best-pending"
    if not pending.is_dir():
        return
    try:
        at = checkpoint.read_meta(pending)["step"]
    except checkpoint.DamagedCheckpoint:
        at = None
    if at is not None and at <= step:
        checkpoint.replace_dir(pending, run_dir / "best")
        return
    shutil.rmtree(pending)
    say(
        f"dropped {pending.name}/ "
        + (
            f"from step {at}, after checkpoint {step}: those steps are replayed"
            if at is not None
            else "(damaged)"
        )
    )


def _gap(row: dict) -> str:
    """An exploitability row in words: "exploitability X" (two-player zero-sum), else "NashConv X"."""
    if row["exploitability"] is None:
        return f"NashConv {row['nash_conv']:.4f}"
    return f"exploitability {row['exploitability']:.4f}"


def _walk(row: dict) -> str:
    """A perfect-play row (`perfect_play_rows`) in words."""
    return (
        f"{row['game']} seat {row['seat']}: blunders {row['blunders']}/{row['positions']}, "
        f"loses to perfect play {row['adversary_loss']:.2f}"
    )


def _console_line(step: int, m: dict, ev: list[dict]) -> str:
    """A step's console line: its metrics `m` (none before the first step) and evaluation rows."""
    if not m:
        parts = [f"step {step:>4}", "before training"]
    else:
        parts = [f"step {step:>4}", *_metric_parts(m)]
    for r in ev:
        if r.get("kind") == "exploitability":
            parts.append(f"| {r['game']} {_gap(r)}")
            continue
        if r.get("kind") == "perfect_play":
            parts.append(f"| {_walk(r)}")
            continue
        held = " (held out)" if r.get("split") == "held_out" else ""
        parts.append(
            f"| eval {r['game']}{held} vs {r['opponent']}: non-losing {r['non_losing']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        )
    if ev and ev[0].get("selection_score", -1) >= 0:
        parts.append(f"| selection {ev[0]['selection_score']:.3f}")
    return "  ".join(parts)


def _metric_parts(m: dict) -> list[str]:
    if any(
        k.endswith("target_kl") for k in m
    ):  # a full-width step (training.full_width): no matches
        gaps = [k for k in m if k.endswith("exploitability")] or [
            k for k in m if k.endswith("nash_conv")
        ]
        named = ("target_kl", "fit_kl")
        parts = [f"{k.replace('/', ' ')} {m[k]:.4f}" for k in gaps]
        parts += [f"{k.replace('/', ' ')} {m[k]:.0f}" for k in m if k.endswith("blunders")]
        parts += [f"{k.replace('/', ' ')} {m[k]:.4f}" for k in m if k.endswith(named)]
        return parts + [f"lr {m['lr']:.2e}", f"{m['step_seconds']:.1f}s"]
    parts = [f"reward {m['reward']:+.3f}"]
    if "win_rate" in m:
        parts.append(f"win {m['win_rate']:.2f}")
    parts += [
        f"invalid {m['invalid_rate']:.2f}",
        f"len {m['response_length']:.1f}",
        f"kl {m.get('approx_kl_behaviour', 0):.4f}",
        f"ent {m.get('entropy', float('nan')):.3f}",
        f"clip {m.get('clip_frac', 0):.3f}",
        f"tok/s {m['rollout_tokens_per_s']:.0f}/{m['learn_tokens_per_s']:.0f}",
        f"{m['step_seconds']:.1f}s",
    ]
    return parts


# --- the loop -----------------------------------------------------------------------------


def schedule_on_resume(cfg: TrainConfig, ckpt_dir: Path, horizon_given: bool, say) -> TrainConfig:
    """`cfg` with the lr schedule's horizon a resumed run keeps: `learner.total_steps` as the run
    started with it (its newest intact checkpoint's config), so `--steps` only moves where the run
    stops and a resumed run follows the schedule of the unbroken one. `horizon_given` (the config or
    `--set` names learner.total_steps): cfg's horizon replaces the run's, said in a warning line."""
    folder, _ = checkpoint.resume_point(ckpt_dir)
    if folder is None or cfg.learner.lr_schedule != "cosine":
        return cfg
    stored = (checkpoint.read_meta(folder).get("config") or {}).get("learner") or {}
    was = stored.get("total_steps") if stored.get("lr_schedule") == "cosine" else None
    if not isinstance(was, int) or was == cfg.learner.total_steps:
        return cfg
    if horizon_given:
        say(
            f"warning: learner.total_steps {cfg.learner.total_steps} replaces the lr schedule's horizon "
            f"this run started with ({was}): from here on the run differs from an unbroken one"
        )
        return cfg
    return replace(cfg, learner=replace(cfg.learner, total_steps=was))


def schedule_line(cfg: TrainConfig, kept: bool = False) -> str:
    """Where the lr schedule ends, in training steps, e.g. "lr cosine to step 600 (learner.total_steps 2400)";
    `kept`: a resume kept the run's horizon (said)."""
    c = cfg.learner
    if c.lr_schedule != "cosine" or not c.total_steps:
        return f"lr {c.lr_schedule} {c.lr:g}"
    end = c.total_steps / (cfg.epochs * cfg.minibatches)
    line = f"lr cosine to step {end:g} (learner.total_steps {c.total_steps})"
    if kept:
        line += " as the run started"
    if cfg.steps > end:
        line += f", then at its floor {c.lr * c.min_lr_ratio:.3g}"
    return line


def train(
    cfg: TrainConfig, resume: bool = False, console=None, horizon_given: bool = False
) -> dict:
    """Run (or resume) training; returns {"step", "elapsed", "games", "eval": last eval rows}.

    A resume keeps the lr schedule's horizon the run started with (`schedule_on_resume`; `cfg.steps`
    says only where it stops) unless `horizon_given`: cfg's learner.total_steps was set explicitly.
    """
    console = console or make_console(highlight=False)
    run_dir = Path(cfg.run_dir)
    ckpt_dir = run_dir / "checkpoints"
    resume = prepare_run_dir(run_dir, resume, console.print)
    if resume:
        cfg = schedule_on_resume(cfg, ckpt_dir, horizon_given, console.print)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config_dict(cfg), sort_keys=False))
    set_threads(cfg.threads, verbose=False)
    announce_threads(console.print)  # in the run's log, not as an error line

    # model, learner, rollout backend, league
    seed_everything(cfg.seed)  # LoRA init draws from torch
    # fp32 master weights (built on the host when the learner keeps them there); the learner
    # computes in a bf16 copy on the device when learner.precision says so
    device = resolve_device(cfg.device)
    master_device = "cpu" if cfg.learner.offload_optimizer else device
    model, tokenizer = load_model(cfg.model, dtype="float32", device=master_device)
    learner = Learner(model, tokenizer, cfg.learner, device=device)
    backend = make_backend(cfg, learner, tokenizer)
    rng = seed_everything(
        cfg.seed
    )  # again: an in-process vLLM engine reseeds the global RNGs at start-up
    league = start_league(cfg)
    adv_state: dict = {}
    restarts = RestartBuffer({g.name: g.restart_buffer for g in cfg.games})
    images = {
        g.name: g.symmetries for g in cfg.games if g.symmetries
    }  # symmetric images per learning turn, by game
    positive_images = frozenset(g.name for g in cfg.games if g.symmetry_advantages == "positive")
    start_step, elapsed, games_played, best = 0, 0.0, 0, -1.0
    budget_elapsed = (
        0.0  # the elapsed time the time rule checked at the last step (before its evaluation)
    )
    if resume:
        (
            start_step,
            league,
            adv_state,
            elapsed,
            games_played,
            best,
            budget_elapsed,
            restart_state,
        ) = resume_from(ckpt_dir, learner, rng, console.print)
        restarts.load_state_dict(restart_state)
        sync_weights(learner, backend)
        for name in ("metrics.jsonl", "eval.jsonl"):
            _truncate_after(run_dir / name, start_step)
        settle_best(run_dir, start_step, console.print)
        console.print(
            f"resumed {run_dir} at step {start_step} ({games_played} games, {elapsed / 60:.1f} min); "
            f"this run stops at step {cfg.steps}; {schedule_line(cfg, kept=not horizon_given)}"
        )
    spent = resume and checkpoint.over_budget(
        budget_elapsed, cfg.max_minutes
    )  # the run stopped on it: no step more
    if spent and start_step < cfg.steps:
        console.print(
            f"time budget spent: max_minutes {cfg.max_minutes:g} was reached at step {start_step}; no step trained "
            "(raise max_minutes to train on)"
        )
    if (
        cfg.league.ratings
    ):  # read at every start and resume: a tournament played meanwhile informs the rest of the run
        elo, stands_for = tournament_names(stored_ratings(cfg.league.ratings))
        league.use_ratings(elo, stands_for)
        console.print(
            f"league: PFSP from the ratings in {cfg.league.ratings} ({len(elo)} players, {stands_for} stands for the policy)"
        )
    opponents = Opponents(cfg, learner.device)
    full_width = None
    if cfg.full_width.enabled:
        full_width = FullWidth(
            cfg, LLMAgent(POLICY, backend, replace(cfg.agent, seed=cfg.seed)), tokenizer
        )
        console.print(
            f"full width: {full_width.sequences} move sequences over "
            + ", ".join(f"{t.name} ({t.size} {t.rows_named})" for t in full_width.tables)
            + "; no matches are played"
        )
    rollouts = None
    if cfg.ray.address:
        rollouts = RayRollouts.start(cfg, learner, start_step)
        console.print(
            f"ray: {len(rollouts.pool.workers)} rollout worker(s) at {cfg.ray.address}, max_staleness {cfg.ray.max_staleness}; "
            f"weight sync {rollouts.sync_bytes / 1e6:.1f} MB per step"
        )
    writer = SummaryWriter(str(run_dir / "tb"), purge_step=start_step + 1 if resume else None)
    n_params = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    console.print(
        f"training {cfg.model} ({n_params / 1e6:.1f}M trainable) on {', '.join(g.name for g in cfg.games)}; "
        f"run dir {run_dir}; steps {start_step}->{cfg.steps}; {schedule_line(cfg)}"
    )

    def run_eval(step: int) -> list[dict]:
        nonlocal best
        if not cfg.eval.every:
            return []
        rows, score = evaluate(cfg, backend, step)
        if score > best:
            best = score
            checkpoint.save_policy(
                run_dir / "best-pending",
                learner,
                step,
                config=config_dict(cfg),
                selection_score=score,
                eval=rows,
            )
        for r in rows:
            r.update(minutes=elapsed / 60, train_games=games_played, selection_score=score)
            _append(run_dir / "eval.jsonl", r)
            tag = (
                f"eval/{r['game']}/{r['opponent']}"
                if r["split"] == "train"
                else f"eval_held_out/{r['game']}/{r['opponent']}"
            )
            writer.add_scalar(f"{tag}/non_losing", r["non_losing"], step)
            writer.add_scalar(f"{tag}/mean_return", r["mean_return"], step)
        for r in exploitability_rows(cfg, backend, step):
            r.update(minutes=elapsed / 60, train_games=games_played)
            _append(run_dir / "eval.jsonl", r)
            kind = "nash_conv" if r["exploitability"] is None else "exploitability"
            writer.add_scalar(f"eval/{r['game']}/{kind}", r[kind], step)
            rows.append(r)
        for r in perfect_play_rows(cfg, backend, step):
            r.update(minutes=elapsed / 60, train_games=games_played)
            _append(run_dir / "eval.jsonl", r)
            writer.add_scalar(f"eval/{r['game']}/blunders_seat{r['seat']}", r["blunders"], step)
            writer.add_scalar(
                f"eval/{r['game']}/adversary_loss_seat{r['seat']}", r["adversary_loss"], step
            )
            rows.append(r)
        if score >= 0:
            writer.add_scalar("eval/selection_score", score, step)
        if rows:
            plot_eval(run_dir)
        return rows

    def save(step: int) -> None:
        state = {
            "advantage": adv_state,
            "elapsed": elapsed,
            "games": games_played,
            "best": best,
            "budget_elapsed": budget_elapsed,
            "restarts": restarts.state_dict(),
        }
        checkpoint.save(
            ckpt_dir,
            learner,
            step,
            config=config_dict(cfg),
            league=league.state_dict(),
            state=state,
            rng=rng,
            keep=cfg.keep_checkpoints,
        )
        settle_best(run_dir, step, console.print)

    last_eval: list[dict] = []
    if start_step == 0 and not resume:  # a resume from a step-0 checkpoint has its evaluation
        t0 = time.perf_counter()
        last_eval = run_eval(0)
        elapsed += time.perf_counter() - t0
        console.print(_console_line(0, {}, last_eval))
        if cfg.checkpoint_initial:
            save(0)

    step = start_step
    for step in range(start_step + 1, cfg.steps + 1 if not spent else 0):
        t0 = time.perf_counter()
        if full_width is not None:  # no matches: exact values over the game's whole tree
            t1 = time.perf_counter()
            m = full_width.step(learner, adv_state)
            sync_weights(learner, backend)
            t_roll, t_learn = 0.0, time.perf_counter() - t1
            rollout_tokens = 0
            learn_tokens = full_width.tokens * cfg.full_width.fit_steps
        else:
            # 1. matches: self-play pairs and PFSP-drawn league opponents
            if rollouts is None:
                planned = plan_step(cfg, league, rng, step, restarts)
                opponents.refresh_exploiters(league, backend, step)
                agents = step_agents(cfg, backend, opponents, step_lineup(league, planned, rng))
                with Progress(
                    total=len(planned), desc=f"step {step} rollout", leave=False
                ) as bar:  # the step's line follows
                    records = play_step(planned, agents, cfg, progress=bar)
                for rec in records:
                    rec.policy_version = step - 1
            else:  # Ray workers; with max_staleness 1 this step's matches were started during the last update
                planned, records = rollouts.collect(step, league, rng, restarts)
            by_id = {p.match_id: opp for p, opp in planned}
            match_opps = [by_id[r.match_id] for r in records]
            for rec, opp in zip(records, match_opps):
                if opp is not None and rec.error is None:
                    for o in _score(rec, POLICY):
                        league.record(opp, {"win": 1.0, "draw": 0.5, "loss": 0.0}[o])
            if any(g.restarts for g in cfg.games):
                league_only = {g.name for g in cfg.games if g.restart_from == "league"}
                restarts.add(
                    lost_positions(
                        [
                            r
                            for r, o in zip(records, match_opps)
                            if o is not None or r.game not in league_only
                        ],
                        POLICY,
                    )
                )
            if rollouts is not None and cfg.ray.max_staleness and step < cfg.steps:
                rollouts.start_step(
                    step + 1, league, rng, restarts
                )  # on the current weights, while the learner updates
            t_roll = time.perf_counter() - t0
            rollout_tokens = sum(
                len(t.prompt_token_ids) + len(t.token_ids)
                for r in records
                for t in r.turns
                if t.agent == POLICY
            )
            games_played += len(records)

            # 2. advantages -> sequences -> PPO updates
            t1 = time.perf_counter()
            extra = {}
            if (
                cfg.advantage.estimator == "critic"
            ):  # the value head's estimates of every learning turn first
                turns = learning_samples(records, cfg.advantage)
                values = learner.values(sequences_from_samples(turns, tokenizer)) if turns else []
                extra["values"] = {(t.match_index, t.turn_index): v for t, v in zip(turns, values)}
            samples = compute_advantages(records, cfg.advantage, adv_state, **extra)
            seqs = sequences_from_samples(
                samples, tokenizer, recompute=behaviour_recompute(cfg, learner)
            )
            if images:
                seqs += symmetric_sequences(samples, images, tokenizer, rng, positive_images)
            m = rollout_metrics(records, match_opps)
            if seqs:
                if cfg.epochs * cfg.minibatches > 1:
                    learner.prepare(seqs)  # freeze behaviour logprobs before the first update
                stats: dict[str, list[float]] = defaultdict(list)
                for _ in range(cfg.epochs):
                    order = (
                        rng.permutation(len(seqs)) if cfg.minibatches > 1 else np.arange(len(seqs))
                    )
                    for chunk in np.array_split(order, cfg.minibatches):
                        if len(chunk):
                            for k, v in learner.step([seqs[i] for i in chunk]).items():
                                stats[k].append(v)
                m.update({k: float(np.mean(v)) for k, v in stats.items()})
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
                sync_weights(learner, backend)
            else:
                console.print(
                    f"step {step}: no policy turns to learn from (all matches aborted?); no update"
                )
            if rollouts is not None:
                rollouts.publish(learner, step)  # version `step`: what the workers play next
            t_learn = time.perf_counter() - t1
            learn_tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in seqs) * cfg.epochs
            m["samples"] = float(len(seqs))
        elapsed += time.perf_counter() - t0
        m.update(
            rollout_seconds=t_roll,
            learn_seconds=t_learn,
            step_seconds=t_roll + t_learn,
            rollout_tokens_per_s=rollout_tokens / max(t_roll, 1e-9),
            learn_tokens_per_s=learn_tokens / max(t_learn, 1e-9),
            games=float(games_played),
            minutes=elapsed / 60,
        )
        for name, p in league.probabilities().items() if league.opponents else []:
            writer.add_scalar(f"league/p/{name}", p, step)
            writer.add_scalar(f"league/win_rate/{name}", league.win_rate(name), step)

        # 3. evaluation, league snapshot, checkpoint
        budget_elapsed = elapsed
        last = step == cfg.steps or checkpoint.over_budget(elapsed, cfg.max_minutes)
        ev = []
        if cfg.eval.every and (step % cfg.eval.every == 0 or last):
            t2 = time.perf_counter()
            ev = last_eval = run_eval(step)
            elapsed += time.perf_counter() - t2
        if cfg.league.snapshot_every and step % cfg.league.snapshot_every == 0:
            path = run_dir / "league" / f"step_{step:08d}.safetensors"
            save_snapshot(learner, path)
            league.add(f"ckpt-{step}", "checkpoint", str(path))
            kept = {o.spec for o in league.opponents}
            opponents.forget(kept)
            for f in (run_dir / "league").glob("*.safetensors"):
                if str(f) not in kept:
                    f.unlink()
        if cfg.league.tournament.every and step % cfg.league.tournament.every == 0:
            t3 = time.perf_counter()
            elo = play_league_tournament(cfg, league, step, backend, opponents)
            if elo is not None:
                league.use_ratings(elo, POLICY)
                for name, r in elo.items():
                    writer.add_scalar(f"league/elo/{name}", r, step)
                console.print(
                    f"step {step:>4}  league tournament ({cfg.league.tournament.format}, {len(elo)} players): policy {elo[POLICY]:.0f} Elo; "
                    + ", ".join(
                        f"{n} {r:.0f}"
                        for n, r in sorted(elo.items(), key=lambda kv: -kv[1])
                        if n != POLICY
                    )
                )
            elapsed += time.perf_counter() - t3
        _append(run_dir / "metrics.jsonl", {"step": step, **m})
        for k, v in m.items():
            writer.add_scalar(f"train/{k}", v, step)
        if step % cfg.log_every == 0 or ev:
            console.print(_console_line(step, m, ev))
        if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or last:
            save(step)
        if last:
            break
    writer.close()
    if rollouts is not None:
        rollouts.shutdown()
    if hasattr(backend, "close"):  # a vLLM engine holds its KV cache (a share of RAM) until closed
        backend.close()
    if best >= 0 and cfg.eval.keep_best:
        console.print(
            f"best selection score (mean non-losing on the selection matches): {best:.3f}, policy in {run_dir / 'best'}"
        )
    return {
        "step": step,
        "elapsed": elapsed,
        "games": games_played,
        "eval": last_eval,
        "best": best,
    }
