"""The training config: `TrainConfig` and its sections, read from YAML and checked whole.

`load_config(path)` / `parse_config(mapping)` build a `TrainConfig` and check every field
before anything heavy starts (no model is loaded until the config is known to be good):
each key by the rule next to its field (`core.typed_config`: types from the dataclass
hints, finite numbers, names from a fixed set with a did-you-mean, ranges), then the rules
that join several keys (`_validate`), games (made once with their params) and agent specs.
Every error is one line naming the key: `learner.lr must be > 0, got -0.001`.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

import games
from agents import make_agent, parse_spec
from agents.llm_agent import LLMAgentConfig
from agents.models import TINY, seeded, tiny_llama_args
from agents.transformers_backend import TransformersBackend
from core.overrides import merge
from core.typed_config import above, at_least, build, did_you_mean, option, within
from evaluation.blunders import solvable
from evaluation.exploitability import info_states
from evaluation.suites import (
    SELF,  # eval opponent spec: the policy in every seat
    EvalGame,
    field_members,
    game_spec,
    opponent_entry,
    plans,
)
from games.entry import GameEntry
from tournaments.formats import FORMATS as TOURNAMENT_FORMATS
from tournaments.formats import format_options
from tournaments.run import stored_ratings
from training.advantages import AdvantageConfig
from training.exploiter import exploiter_every
from training.full_width import FullWidthConfig, PositionTree
from training.league import WEIGHTINGS, tournament_names
from training.learner_config import LearnerConfig

POLICY = "policy"  # the learning agent's name in every match
REQUIRED = ("model", "games", "steps")  # what a run is; no silent defaults for these
BACKENDS = ("transformers", "vllm")
VLLM_DTYPES = ("float32", "bfloat16", "float16")  # the vLLM engine's dtype (backend_kwargs.dtype)
EXAMPLE = "configs/train_tictactoe_tiny.yaml"
BRANCH = "an integer >= 1 (match pairs sharing one deal and opening)"


@dataclass
class TrainingGame(GameEntry):
    """One training game: a `games.entry.GameEntry` and the options that shape its sampled
    self-play matches (they mean nothing to a tournament or an evaluation, which play every
    match from the start)."""

    branch: int = option(1, what=BRANCH, check=(lambda v: v >= 1, BRANCH))
    """match pairs come in groups of `branch` playing one deal and opening (and one league opponent), so the
    same positions recur within a step's batch: the step-level groups of the `gigpo` estimator"""
    restarts: float = option(
        0.0,
        check=(
            lambda v: 0.0 <= v <= 1.0,
            "in [0, 1] (share of self-play pairs restarting from a lost position)",
        ),
    )
    """share of the self-play pairs that start from a position the policy lost from in earlier steps (the
    moves before its losing move, `training.restarts`), instead of an opening; 0: none"""
    restart_buffer: int = option(
        256, what="an integer >= 1", check=(lambda v: v >= 1, "an integer >= 1")
    )
    """lost positions kept per game for restarts (the oldest drop out)"""
    restart_explore: bool = False
    """the first move from a restart position is drawn uniformly among the legal moves and trained on as the
    policy's own (an exploring start: a saving move the policy has written off gets tried; constrained agents)"""
    restart_from: str = option("all", choices=("all", "league"))
    """which losses restarts come from: "all" matches, or only "league" ones (against bots and past checkpoints,
    where the policy meets play unlike its own; in self-play one seat loses every decisive match)"""
    symmetries: int = 0
    """train on each learning turn and on this many of its rotated/mirrored images too (0-7 for tic-tac-toe;
    games with `SYMMETRIES` only; constrained agents, agent.mode fresh; `training.symmetry`)"""
    symmetry_advantages: str = option("all", choices=("all", "positive"))
    """which turns get images: "all", or "positive" (advantage > 0 only: no off-policy push-down)"""


@dataclass
class LeagueTournament:
    """A tournament of the league's snapshots and the policy every few steps; its ratings set PFSP."""

    every: int = option(0, check=at_least(0))
    """play one every N steps (after the update; 0: never) and let its ratings set the PFSP weights"""
    format: str = option("adaptive", choices=tuple(TOURNAMENT_FORMATS))
    """tournament format (tournaments.formats); adaptive: Swiss rounds, then the most informative pairs, within max_matches"""
    max_matches: int = option(0, check=at_least(0))
    """at most this many matches (0: the format's whole schedule); Swiss plays fewer rounds to fit"""
    games_per_pairing: int = option(2, check=at_least(1))
    """games each pairing plays per training game (2: one in each seat)"""


@dataclass
class LeagueConfig:
    """Who the policy plays against during training."""

    self_play: float = option(1.0, check=within(0, 1))
    """share of each step's match pairs with the current policy in every seat; the rest meet league opponents"""
    opponent_seats: int = option(1, check=at_least(1))
    """seats a league opponent takes in a league match, the policy playing the others (fewer than
    every training game's players); the opponent's seats rotate from match to match. Two players: 1"""
    bots: list = option(
        factory=list,
        check=(lambda v: all(isinstance(s, str) and s for s in v), "a list of agent spec strings"),
    )
    """bot specs in the league (e.g. random, mcts:25); each is named by its spec string"""
    snapshot_every: int = option(0, check=at_least(0))
    """add a snapshot of the policy to the league every N steps (0: never)"""
    weighting: str = option("hard", choices=WEIGHTINGS)
    """PFSP weighting: hard (1-x)^2, variance x(1-x) or uniform"""
    decay: float = option(0.99, check=(lambda v: 0.0 < v <= 1.0, "in (0, 1]"))
    """per-game decay of the win-rate table"""
    max_checkpoints: int = option(10, check=at_least(1))
    """snapshots kept in the league (oldest retired and deleted first)"""
    max_loaded: int = option(2, check=at_least(1))
    """the most distinct snapshots one step plays (each adds one batched call per round of the step's matches: bench/league_step.py)"""
    ratings: str = ""
    """a tournament store (.db) whose Bradley-Terry ratings set the PFSP weights from the start
    (its `NAME@STEP` players are the league's `ckpt-STEP`; the newest rated checkpoint stands for the policy)"""
    tournament: LeagueTournament = field(default_factory=LeagueTournament)
    """a checkpoint tournament every `tournament.every` steps whose ratings replace the PFSP win rates"""


@dataclass
class PeriodicEvalConfig:
    """Periodic evaluation (`evaluation.run.evaluate`; nothing here touches the training RNGs).

    Two sets of matches at every evaluation point: the report set (eval.seed) over the
    training games and the held-out games is what eval.jsonl, TensorBoard and the curves
    show; the selection set (eval.select_seed, training games only) picks `best`. A policy
    kept for its best score is thus reported on matches that did not choose it, and no
    held-out game takes part in the choice.
    """

    every: int = option(10, check=at_least(0))
    """evaluate every N steps (and before the first); 0: never"""
    games: int = option(
        200, check=(lambda v: v >= 0 and v % 2 == 0, "even (half in each seat) and >= 0")
    )
    """report set: matches per (game, opponent), half in each seat"""
    opponents: Any = field(default_factory=lambda: ["random"])
    """agent specs for every training game, or a mapping game -> list of specs; "self" = the policy in every seat"""
    held_out: list = field(default_factory=list)
    """games the policy does not train on, in the report set: names or {name, opponents, params, opening}
    (`arena eval`'s game entries; without opponents: `evaluation.suites.DEFAULT_OPPONENTS`)"""
    temperature: float = option(0.0, check=at_least(0))
    """sampling temperature of the policy in evaluation (0: greedy)"""
    keep_best: bool = True
    """keep the policy with the best selection score so far (mean non-losing rate over the training games'
    selection matches) in <run_dir>/best (a model/agent path)"""
    select_games: int = option(
        0,
        check=(
            lambda v: v >= 0 and v % 2 == 0,
            "even (half in each seat) and >= 0 (0: as many as eval.games)",
        ),
    )
    """selection set: matches per (training game, opponent) that pick `best` (0: as many as eval.games)"""
    seed: int = option(1_000_000, check=(lambda v: 0 <= v < 2**31, "in [0, 2**31)"))
    """match seeds of the report set (the same matches every time)"""
    select_seed: int = option(2_000_000, check=(lambda v: 0 <= v < 2**31, "in [0, 2**31)"))
    """match seeds of the selection set (must differ from eval.seed)"""
    exploitability: bool = False
    """also the exact exploitability of the policy as it plays in training (the `agent` settings, its
    sampling temperature) on every training game at every evaluation point
    (`evaluation.exploitability`: OpenSpiel games with at most 5000 information states, e.g. Kuhn
    12, Leduc 936) -> eval.jsonl rows of kind "exploitability", TensorBoard, the curve"""
    perfect_play: bool = False
    """also walk the tree of every training game the solver searches to the end (tic-tac-toe):
    for each seat, the positions the policy reaches against any opponent at the evaluation
    temperature, those where it makes a value-losing move, and its result against a perfect
    adversary (`evaluation.perfect_play`) -> eval.jsonl rows of kind "perfect_play", TensorBoard,
    the curve"""


@dataclass
class RayConfig:
    """Self-play rollouts on Ray workers (training.ray_rollouts, docs/guides/ray.md); the learner stays in this process."""

    address: str = ""
    """"": rollouts in this process (the default); "local": a Ray instance started by the run; HOST:PORT or "auto": a running cluster"""
    rollout_workers: int = option(2, check=at_least(1))
    """rollout workers (Ray actors), each holding a copy of the policy and the league opponents"""
    cpus: float = option(1.0, check=above(0))
    """CPUs per rollout worker (its Ray resource and torch threads)"""
    gpus: float = option(0.0, check=at_least(0))
    """GPUs per rollout worker (0.5: two workers share one GPU)"""
    max_staleness: int = option(
        0,
        check=(
            lambda v: v in (0, 1),
            "0 (on-policy) or 1 (one step behind; deeper pipelines are not implemented)",
        ),
    )
    """0: every step plays the weights of the step before (on-policy); 1: the workers play step t+1 with
    the weights before step t's update while the learner updates (one step behind)"""


@dataclass
class TrainConfig:
    """A self-play training run (YAML: these keys; sections are mappings)."""

    model: str = option("tiny-llama", check=(lambda v: bool(v.strip()), "a model name"))
    """policy model: a name for agents.models.load_model (tiny-llama[:seed] or tiny-llama:hidden=128:heads=8:..., smollm2-135m, a folder, a hub id);
    a tiny-llama without a seed of its own is initialised with the run's `seed`"""
    backend: str = option("transformers", choices=BACKENDS)
    """rollout backend: transformers (in process, shares the learner's module) or vllm (weights loaded after every update)"""
    backend_kwargs: dict = field(default_factory=dict)
    """extra arguments for the rollout backend (e.g. max_batch_size; vLLM engine options such as dtype, default the
    learner's, and enable_prefix_caching, default on; see docs/guides/vllm.md)"""
    device: str = option(
        "auto",
        check=(
            lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
            "auto, cpu, cuda or cuda:N",
        ),
    )
    """where the learner (and the in-process rollouts) run: auto (cuda when available, else cpu), cpu, cuda or cuda:N"""
    run_dir: str = ""
    """output folder; default runs/<config file stem>"""
    seed: int = option(0, check=(lambda v: 0 <= v < 2**32, "in [0, 2**32)"))
    """seeds a tiny-llama's initial weights (unless its name has a seed), the LoRA init, torch/numpy/python RNGs and the loop's generator"""
    steps: int = option(100, check=at_least(1))
    """training steps (each: one batch of matches, then the updates): where the run stops, and at
    its start the cosine lr schedule's horizon unless learner.total_steps sets it"""
    max_minutes: float = option(0.0, check=at_least(0))
    """stop (with a final evaluation and checkpoint) once the run's wall time passes this; 0: no limit"""
    threads: int = option(0, check=at_least(0))
    """torch CPU threads (0: chosen from the usable CPUs and the load at start, printed); 1 is
    fastest for tiny models on a busy machine, and a fixed count keeps runs bit-reproducible"""
    games: list = field(default_factory=lambda: [TrainingGame("tic_tac_toe")])
    """training games: names or {name, weight, params} mappings"""
    matches_per_step: int = option(
        64,
        check=(
            lambda v: v >= 2 and v % 2 == 0,
            "even (matches come in pairs, one per seat order) and >= 2",
        ),
    )
    """matches played per step (in pairs: one per seat order against the same opponent)"""
    concurrency: int = option(64, check=at_least(1))
    """matches live at once (the policy's turns across them share one backend batch)"""
    epochs: int = option(1, check=at_least(1))
    """passes over each step's batch"""
    minibatches: int = option(1, check=at_least(1))
    """optimizer steps per pass (the batch is shuffled and split)"""
    max_turns: int = option(200, check=at_least(1))
    """decisions after which a match is aborted (it then carries no learning signal)"""
    prompt_cache: bool = False
    """the policy's rollouts prefill each distinct prompt once a step and reuse its KV cache
    (`TransformersBackend.prompt_cache`; the weights do not change within a step's rollouts):
    memory-k and state-only prompts repeat across matches and rounds. Not bit-identical to a
    run without it (a prompt prefilled alone rounds differently from one in a padded batch)"""
    checkpoint_every: int = option(20, check=at_least(0))
    """checkpoint every N steps (and at the end); 0: only at the end"""
    checkpoint_initial: bool = False
    """also checkpoint the initial policy (step 0) before the first update, so that a tournament
    of the run's checkpoints ranks the untrained policy beside the trained ones"""
    keep_checkpoints: int = option(2, check=at_least(0))
    """checkpoints kept on disk, the newest; 0: all"""
    log_every: int = option(1, check=at_least(1))
    """console line every N steps (TensorBoard and metrics.jsonl get every step)"""
    agent: LLMAgentConfig = field(
        default_factory=lambda: LLMAgentConfig(temperature=1.0, max_retries=0)
    )
    """how the policy prompts and samples (agents.llm_agent.LLMAgentConfig)"""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """advantage estimator (training.advantages.AdvantageConfig); learners is set to the policy"""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """optimizer and loss (training.learner_config.LearnerConfig); temperature follows agent.temperature"""
    league: LeagueConfig = field(default_factory=LeagueConfig)
    """opponent pool and matchmaking"""
    eval: PeriodicEvalConfig = field(default_factory=PeriodicEvalConfig)
    """periodic evaluation"""
    ray: RayConfig = field(default_factory=RayConfig)
    """rollout workers on a Ray cluster (absent: rollouts in this process)"""
    full_width: FullWidthConfig = field(default_factory=FullWidthConfig)
    """full-width self-play (training.full_width): no matches, exact move values over a small game's whole
    tree, Magnetic Mirror Descent's target fitted at every information state"""
    roles: dict = field(default_factory=dict)
    """per-role policies: role name -> the seats it plays (`{first: [player_0], second: [player_1]}`);
    each role has its own LoRA adapter on the shared base (learner.lora_rank > 0), plays its seats
    with it and learns from their turns only. Every seat of every training and held-out game must
    be in exactly one role. In a game that deals roles each match (werewolf), name its roles
    instead of seats (`{wolves: [werewolf], village: [seer, doctor, villager]}`): a seat then
    plays with the adapter of the role it was dealt. Empty: one policy plays every seat"""


# --- what the loop sets itself ---------------------------------------------------------------

SET_BY_LOOP = {  # keys the loop sets itself: a value in the config would be silently replaced
    "learner.temperature": "learner.temperature is set from agent.temperature (the rollouts' temperature); remove it",
    "advantage.learners": f"advantage.learners is set by the loop (the policy's turns, agent {POLICY!r}); remove it",
    "agent.seed": "agent.seed is set by the loop (from seed, and eval.seed in evaluation); remove it",
}
ROLLOUT_TEMPERATURE = (
    lambda v: v > 0,
    "> 0: training rollouts sample (greedy evaluation is eval.temperature: 0)",
)  # agent.temperature in training (an agent elsewhere may be greedy)


def _set_by_loop(key: str, value: Any) -> str | None:
    """Why `key` may not be set in a train config (`SET_BY_LOOP`), or None."""
    if key in SET_BY_LOOP and not (key == "agent.seed" and value is None):
        return SET_BY_LOOP[key]
    return None


def parse_config(d: Mapping, default_run_dir: str = "runs/train") -> TrainConfig:
    """A validated `TrainConfig` from a parsed mapping; derived values filled in."""
    if not isinstance(d, Mapping):
        raise ValueError(f"a train config must be a mapping, got {type(d).__name__}")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise ValueError(
            f"a train config needs {', '.join(REQUIRED)}; missing: {', '.join(missing)} (see {EXAMPLE})"
        )
    d = dict(d)
    games_in = d.pop("games")
    cfg = build(TrainConfig, d, "", refuse=_set_by_loop)
    cfg.games = _games(games_in)
    _validate(cfg)
    # derived values
    cfg.run_dir = cfg.run_dir or default_run_dir
    cfg.model = seeded(
        cfg.model, cfg.seed
    )  # a seed sweep of tiny-llama runs starts from as many networks
    cfg.learner.temperature = cfg.agent.temperature
    cfg.advantage.learners = [POLICY]
    if cfg.learner.lr_schedule == "cosine" and cfg.learner.total_steps == 0:
        per_step = (
            cfg.full_width.fit_steps * cfg.full_width.minibatches
            if cfg.full_width.enabled
            else cfg.epochs * cfg.minibatches
        )
        cfg.learner.total_steps = cfg.steps * per_step
    return cfg


def _games(games_in: Any) -> list[TrainingGame]:
    if isinstance(games_in, (str, Mapping)):
        games_in = [games_in]
    if not isinstance(games_in, list) or not games_in:
        raise ValueError(
            "games must be a non-empty list of game names or {name, weight, params} mappings"
        )
    out = []
    for i, g in enumerate(games_in):
        if isinstance(g, str):
            g = {"name": g}
        entry = build(TrainingGame, g, f"games[{i}]", base=TrainingGame(""))
        if not entry.name:
            raise ValueError(f"games[{i}].name must be a game name")
        try:
            games.make(
                entry.name, **entry.params
            )  # unknown game (with suggestions) or params: ValueError
        except ValueError as e:
            raise ValueError(f"games[{i}]: {e}") from None
        out.append(entry)
    return out


def _validate(cfg: TrainConfig) -> None:
    """The rules that join several keys (or need a game built); one-line ValueErrors."""
    ok, what = ROLLOUT_TEMPERATURE
    if not ok(cfg.agent.temperature):
        raise ValueError(f"agent.temperature must be {what}, got {cfg.agent.temperature!r}")
    if cfg.model.lower().startswith(TINY):
        try:
            tiny_llama_args(cfg.model)
        except ValueError as e:
            raise ValueError(f"model: {e}") from None
    _check_backend_kwargs(cfg)
    adv = cfg.advantage
    if adv.length_min < 0 or adv.length_min >= adv.length_max:
        raise ValueError(
            f"advantage.length_min must be in [0, length_max), got {adv.length_min} (length_max {adv.length_max})"
        )
    _check_training_games(cfg)
    if adv.teams:
        seats = {a for g in cfg.games for a in games.make(g.name, **g.params).possible_agents}
        unknown = sorted(set(adv.teams) - seats)
        if unknown:
            raise ValueError(
                f"advantage.teams names {', '.join(unknown)}, not a seat of any training game (seats: {', '.join(sorted(seats))})"
            )
    if cfg.learner.loss.magnet_coef > 0 and not cfg.agent.constrained:
        raise ValueError(
            "learner.loss.magnet_coef needs agent.constrained: true (the KL is taken over a turn's allowed moves)"
        )
    if (adv.estimator == "critic") != (cfg.learner.value_coef > 0):
        raise ValueError(
            "advantage.estimator: critic and learner.value_coef > 0 go together (the critic's value head is trained by the value loss)"
        )
    _check_league(cfg)
    _check_eval_opponents(cfg)
    _check_ray(cfg)
    _check_full_width(cfg)
    if cfg.eval.exploitability:
        for g in cfg.games:
            if getattr(games.make(g.name, **g.params), "game", None) is None:
                raise ValueError(
                    f"eval.exploitability needs OpenSpiel games; {g.name} is native (it has no game tree to walk)"
                )
    if cfg.eval.perfect_play:
        _check_solvable(cfg, "eval.perfect_play needs")
    if cfg.eval.select_seed == cfg.eval.seed:
        raise ValueError(
            f"eval.select_seed must differ from eval.seed ({cfg.eval.seed}): best is picked on other matches than the reported ones"
        )
    eval_games(cfg.eval, cfg.games)
    _check_roles(cfg)


ROLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _check_roles(cfg: TrainConfig) -> None:
    """`roles`: names mapped to distinct seats, or to roles the games deal (`TextEnv.ROLES`:
    werewolf's werewolf, seer, doctor, villager), covering every seat of the run's games, with
    the features a run of several adapters supports."""
    roles = cfg.roles
    if not roles:
        return
    seat_role: dict[str, str] = {}
    for role, seats in roles.items():
        if not isinstance(role, str) or not ROLE_NAME.fullmatch(role):
            raise ValueError(
                f"roles: a role name must be a letter then letters, digits or _, got {role!r}"
            )
        if not isinstance(seats, list) or not seats or not all(isinstance(x, str) for x in seats):
            raise ValueError(
                f"roles.{role} must be a non-empty list of seats (player_0, ...) or game roles, got {seats!r}"
            )
        for seat in seats:
            if seat in seat_role:
                raise ValueError(f"roles.{role}: seat {seat} is already role {seat_role[seat]}'s")
            seat_role[seat] = role
    if cfg.learner.lora_rank == 0:
        raise ValueError(
            "roles needs learner.lora_rank > 0 (one LoRA adapter per role on the shared base)"
        )
    for what, bad in (
        ("backend: transformers", cfg.backend != "transformers"),
        ("no league.snapshot_every (a snapshot holds one policy)", cfg.league.snapshot_every > 0),
        ("no full_width", cfg.full_width.enabled),
        ("no games[i].symmetries", any(g.symmetries for g in cfg.games)),
        (
            "an advantage.estimator other than critic (one value head)",
            cfg.advantage.estimator == "critic",
        ),
    ):
        if bad:
            raise ValueError(f"roles needs {what}")
    train, held = eval_games(cfg.eval, cfg.games)
    for g in [*cfg.games, *held]:
        _check_role_cover(seat_role, g.name, games.make(g.name, **g.params))


def _check_role_cover(seat_role: dict[str, str], game: str, env) -> None:
    """Every seat of `game` has a role: the seat is listed, or the game deals roles
    (`ROLES`) and every one of them is listed."""
    dealt = tuple(getattr(env.unwrapped, "ROLES", ()))
    if dealt and any(r in seat_role for r in dealt):
        missing = [r for r in dealt if r not in seat_role]
        what = "game role"
    else:
        missing = [x for x in env.possible_agents if x not in seat_role]
        what = "seat"
    if missing:
        names = ", ".join(dict.fromkeys(seat_role.values()))
        raise ValueError(
            f"roles: {what} {', '.join(missing)} of {game} has no role (roles: {names})"
        )


def seat_roles(roles: Mapping[str, list[str]]) -> dict[str, str]:
    """seat -> role of a `roles` section."""
    return {seat: role for role, seats in roles.items() for seat in seats}


def _check_training_games(cfg: TrainConfig) -> None:
    """The training games' options that depend on the game or the agent, and those kept per game."""
    for i, g in enumerate(cfg.games):
        if g.symmetries:
            module = games.symmetry_module(g.name)
            if module is None:
                raise ValueError(
                    f"games[{i}].symmetries: {g.name} declares no board symmetries (tic_tac_toe does)"
                )
            if not isinstance(g.symmetries, int) or not 0 <= g.symmetries < len(module.SYMMETRIES):
                raise ValueError(
                    f"games[{i}].symmetries must be an integer in [0, {len(module.SYMMETRIES) - 1}] (images per turn), got {g.symmetries!r}"
                )
            if not cfg.agent.constrained or cfg.agent.mode != "fresh":
                raise ValueError(
                    f"games[{i}].symmetries needs agent.constrained: true and agent.mode: fresh (the reply is the move, the prompt one turn's)"
                )
        for key in (
            "symmetries",
            "symmetry_advantages",
            "restart_buffer",
        ):  # kept per game name, not per entry
            if any(h.name == g.name and getattr(h, key) != getattr(g, key) for h in cfg.games):
                raise ValueError(
                    f"games[{i}].{key}: every entry of {g.name} must set the same {key} (it is kept per game)"
                )
        if g.restart_explore and not (g.restarts and cfg.agent.constrained):
            raise ValueError(
                f"games[{i}].restart_explore needs games[{i}].restarts > 0 and agent.constrained: true "
                "(the exploring move is a constrained reply held to one drawn legal move)"
            )


def _check_league(cfg: TrainConfig) -> None:
    """League opponents exist when self_play < 1; bots are distinct, valid specs; ratings and tournaments usable."""
    lg = cfg.league
    if lg.self_play < 1.0 and not lg.bots and lg.snapshot_every == 0:
        raise ValueError(
            "league.self_play < 1 needs opponents: list league.bots or set league.snapshot_every"
        )
    if lg.self_play < 1.0:
        for i, g in enumerate(cfg.games):
            players = len(games.make(g.name, **g.params).possible_agents)
            if lg.opponent_seats >= players:
                raise ValueError(
                    f"league.opponent_seats must be < the players of every training game; games[{i}] {g.name} has {players}, got {lg.opponent_seats}"
                )
    if len(set(lg.bots)) < len(lg.bots):
        raise ValueError(f"league.bots lists a bot twice: {lg.bots}")
    for spec in lg.bots:
        try:
            every = exploiter_every(spec)
        except ValueError as e:
            raise ValueError(f"league.bots: {e}") from None
        if every is None:
            _check_spec(spec, "league.bots")
        else:
            _check_exploiter(cfg)
    _check_league_ratings(lg)


def _check_eval_opponents(cfg: TrainConfig) -> None:
    """eval.opponents: a list of agent specs, or a mapping training game -> list."""
    opp = cfg.eval.opponents
    names = {g.name for g in cfg.games}
    if isinstance(opp, Mapping):
        for game, specs in opp.items():
            if game not in names:
                raise ValueError(
                    f"eval.opponents names game {game!r}, which is not a training game ({', '.join(sorted(names))})"
                )
            if not isinstance(specs, list):
                raise ValueError(f"eval.opponents.{game} must be a list of agent specs")
            for s in specs:
                _check_opponent(s, f"eval.opponents.{game}")
    elif isinstance(opp, list):
        for s in opp:
            _check_opponent(s, "eval.opponents")
    else:
        raise ValueError("eval.opponents must be a list of agent specs or a mapping game -> list")


def eval_games(ev: PeriodicEvalConfig, games_: list[TrainingGame]) -> tuple[list, list]:
    """(training games, held-out games) of the evaluation as `evaluation.suites.EvalGame`s,
    each with its opponents; one-line errors for a bad `eval.held_out` entry.

    Args:
        ev: the run's `eval` section.
        games_: the run's training games.
    """
    opp = ev.opponents
    train = [
        EvalGame(
            g.name,
            params=dict(g.params),
            opponents=[
                opponent_entry(o)
                for o in (opp.get(g.name, []) if isinstance(opp, Mapping) else opp)
            ],
        )
        for g in games_
    ]
    train = [g for g in train if g.opponents]
    held = []
    for i, entry in enumerate(ev.held_out):
        where = f"eval.held_out[{i}]"
        try:
            g = game_spec(entry)
            games.make(g.name, **g.params)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if any(g.name == t.name for t in games_):
            raise ValueError(
                f"{where}: {g.name} is a training game; held-out games are games the policy does not train on"
            )
        for s in g.opponents:
            _check_opponent(s, f"{where}.opponents")
        held.append(g)
    try:
        plans(POLICY, train + held, 2, 0)  # opponent names the match ids can hold
    except ValueError as e:
        raise ValueError(f"eval: {e}") from None
    return train, held


def _check_league_ratings(lg: LeagueConfig) -> None:
    """league.ratings names a readable tournament store; league.tournament has players and a budget it can keep."""
    if lg.ratings:
        if not Path(lg.ratings).is_file():
            raise ValueError(f"league.ratings: no tournament store at {lg.ratings}")
        try:
            tournament_names(stored_ratings(lg.ratings))
        except ValueError as e:
            raise ValueError(f"league.ratings: {lg.ratings}: {e}") from None
    t = lg.tournament
    if t.every and not (lg.snapshot_every or lg.bots):
        raise ValueError(
            "league.tournament rates the league's snapshots and bots: set league.snapshot_every or list league.bots"
        )
    if (
        t.every
        and t.max_matches
        and t.format != "swiss"
        and "max_matches" not in format_options(t.format)
    ):
        raise ValueError(
            f"league.tournament.max_matches: format {t.format} plays its whole schedule; use swiss (fewer rounds) or a format with a budget, or max_matches: 0"
        )


def _check_full_width(cfg: TrainConfig) -> None:
    """full_width.enabled: constrained pure self-play on OpenSpiel games, and no sampled-play option that it would ignore."""
    if not cfg.full_width.enabled:
        return
    for i, g in enumerate(cfg.games):
        game = getattr(games.make(g.name, **g.params), "game", None)
        if game is None:
            raise ValueError(f"full_width needs OpenSpiel games; games[{i}] {g.name} is native")
        try:  # a walk that stops at full_width.max_states: a game too large fails before the model loads
            if cfg.full_width.key == "position":
                PositionTree(game, cfg.full_width.max_states)
            else:
                info_states(game, cfg.full_width.max_states)
        except ValueError as e:
            raise ValueError(f"full_width: games[{i}]: {e} (full_width.max_states)") from None
        if g.symmetries or g.restarts or g.opening:
            raise ValueError(
                f"full_width: games[{i}] sets symmetries, restarts or opening, which shape sampled matches; full width plays none"
            )
    if not cfg.agent.constrained:
        raise ValueError(
            "full_width needs agent.constrained: true (the policy is the exact distribution over the legal moves)"
        )
    lg, loss = cfg.league, cfg.learner.loss
    if lg.self_play < 1 or lg.bots or lg.snapshot_every or lg.tournament.every:
        raise ValueError(
            "full_width is pure self-play: league.self_play 1, no league.bots, snapshots or tournaments"
        )
    if cfg.ray.address:
        raise ValueError("full_width plays no matches: remove ray.address")
    if cfg.epochs != 1 or cfg.minibatches != 1:
        raise ValueError(
            "full_width: set full_width.fit_steps instead of epochs / minibatches (keep both 1)"
        )
    terms = {
        "learner.loss.kl_coef": loss.kl_coef,
        "learner.loss.entropy_coef": loss.entropy_coef,
        "learner.loss.entropy_target": loss.entropy_target,
        "learner.loss.floor_coef": loss.floor_coef,
        "learner.loss.magnet_coef": loss.magnet_coef,
        "learner.value_coef": cfg.learner.value_coef,
    }
    on = [k for k, v in terms.items() if v]
    if on:
        raise ValueError(
            f"full_width fits the step's target by cross-entropy alone; set {', '.join(on)} to 0 "
            "(the magnet is full_width.magnet_coef)"
        )


def _check_ray(cfg: TrainConfig) -> None:
    """ray.address, when set, is usable: Ray installed, transformers workers, no race on snapshot files."""
    r = cfg.ray
    if not r.address:
        return
    if (
        r.address != r.address.strip()
        or ":" not in r.address
        and r.address not in ("local", "auto")
    ):
        raise ValueError(f"ray.address must be local, auto or HOST:PORT, got {r.address!r}")
    try:
        import ray  # noqa: F401 (optional: ray)
    except ImportError:
        raise ValueError("ray.address needs Ray installed: pip install -e '.[ray]'") from None
    if cfg.backend != "transformers":
        raise ValueError(
            f"ray.address: rollout workers sample with the transformers backend; backend {cfg.backend} is not supported on Ray yet"
        )
    if r.max_staleness and cfg.league.snapshot_every:
        raise ValueError(
            "ray.max_staleness 1 with league.snapshot_every is not supported: a snapshot retired after step t "
            "could be deleted while step t+1's matches still play it; use max_staleness 0"
        )


def _check_backend_kwargs(cfg: TrainConfig) -> None:
    kwargs = cfg.backend_kwargs
    if not all(isinstance(k, str) for k in kwargs):
        raise ValueError(f"backend_kwargs must map option names to values, got {kwargs!r}")
    if "max_batch_size" in kwargs and not (
        type(kwargs["max_batch_size"]) is int and kwargs["max_batch_size"] >= 1
    ):
        raise ValueError(
            f"backend_kwargs.max_batch_size must be an integer >= 1, got {kwargs['max_batch_size']!r}"
        )
    if (
        cfg.backend == "vllm"
    ):  # vLLM takes its engine's many options and checks them itself; these two fail late
        if cfg.model.lower().startswith(TINY):
            raise ValueError(
                "backend vllm: tiny-llama has no folder for vLLM to load; save it with save_pretrained and set model to the folder"
            )
        if "dtype" in kwargs and kwargs["dtype"] not in VLLM_DTYPES:
            raise ValueError(
                f"backend_kwargs.dtype must be one of {', '.join(VLLM_DTYPES)} (default: the learner's), got {kwargs['dtype']!r}"
            )
    if cfg.backend == "transformers":
        known = [
            p
            for p in inspect.signature(TransformersBackend).parameters
            if p not in ("model", "name")
        ]
        for k in kwargs:
            if k not in known:
                raise ValueError(
                    f"backend_kwargs: unknown option {k!r} for the transformers backend{did_you_mean(k, known)} (known: {', '.join(known)})"
                )


def _check_solvable(cfg: TrainConfig, who: str) -> None:
    """Every training game is one the solver searches to the end (`evaluation.blunders.solvable`)."""
    for g in cfg.games:
        if not solvable(g.name, g.params):
            raise ValueError(
                f"{who} games the solver searches to the end (tic-tac-toe); {g.name} is not one"
            )


def _check_exploiter(cfg: TrainConfig) -> None:
    """`training.exploiter`'s needs: solvable training games, one setting each, local rollouts,
    no league tournament."""
    _check_solvable(cfg, "league.bots: the exploiter plays")
    seen: dict[str, dict] = {}
    for g in cfg.games:
        if seen.setdefault(g.name, g.params) != g.params:
            raise ValueError(
                f"league.bots: the exploiter needs one parameter setting per game; {g.name} has two"
            )
    if cfg.ray.address:
        raise ValueError("league.bots: the exploiter plays in local rollouts; remove ray.address")
    if cfg.league.tournament.every:
        raise ValueError(
            "league.bots: a league tournament cannot rate the exploiter; set league.tournament.every: 0"
        )


def _check_opponent(spec: Any, where: str) -> None:
    """An evaluation opponent: an agent spec, or a field of them (`evaluation.suites`)."""
    try:
        entry = opponent_entry(spec)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    for member in field_members(entry):
        _check_spec(member, where)


def _check_spec(spec: Any, where: str) -> None:
    """An agent spec as `agents.make_agent` reads it, checked without loading a model."""
    if spec == SELF:
        return
    try:
        d = parse_spec(spec)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    kind = d.pop("type")
    if kind == "human":
        raise ValueError(f"{where}: a human cannot play in training runs")
    if kind == "llm":
        model = d.get("model")
        if isinstance(model, str) and model.lower().startswith(TINY):
            try:
                tiny_llama_args(model)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        options = set(LLMAgentConfig.__dataclass_fields__) | {
            "model",
            "backend",
            "base_url",
            "backend_kwargs",
            "name",
        }
        unknown = sorted(set(d) - options)
        if unknown:
            raise ValueError(f"{where}: agent {spec!r}: unknown option(s) {', '.join(unknown)}")
        return
    try:
        make_agent(spec)  # bots are cheap to build: this checks the name and its options
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def load_config(path: str | os.PathLike, overrides: Mapping | None = None) -> TrainConfig:
    """A `TrainConfig` from a YAML file with `overrides` (`core.overrides.parse_overrides`) merged in
    (their keys replace the file's; a mapping updates the file's section key by key, at any depth);
    ValueError (one line, naming the file and the key) when malformed."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"train config {path} is a folder, not a YAML file")
    if not path.is_file():
        raise ValueError(f"train config {path} not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a YAML text file (byte {e.start} is not UTF-8)") from None
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(
            f"{path}: invalid YAML{f' at line {mark.line + 1}' if mark else ''}: {problem}"
        ) from None
    if d is None or d == {}:
        raise ValueError(
            f"{path} is empty: a train config needs at least {', '.join(REQUIRED)} (see {EXAMPLE})"
        )
    try:
        if not isinstance(d, Mapping):
            raise ValueError(f"a train config must be a mapping, got {type(d).__name__}")
        return parse_config(
            merge(d, dict(overrides or {})), default_run_dir=str(Path("runs") / path.stem)
        )
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def config_dict(cfg: TrainConfig) -> dict:
    """The config as plain data (what config.yaml and the checkpoints hold)."""
    return json.loads(json.dumps(asdict(cfg), default=list))
