"""Who plays whom in a self-play step, and with which weights.

`plan_step` draws a step's matches (self-play pairs and league opponents, with their
seeds and openings); `step_lineup`/`step_agents` build the agents that play them: the
policy over the rollout backend, bots by spec, and league snapshots served by one frozen
module (`Opponents`). Used by the local loop (`training.selfplay`) and by the Ray rollout
workers (`training.ray_rollouts`) alike.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from agents import checkpoint, make_agent
from agents.llm_agent import LLMAgent, LLMAgentConfig
from agents.models import load_model, lora_model
from agents.transformers_backend import TransformersBackend
from arena.runner import MatchPlan, plan_matches, play
from training.config import (  # noqa: F401 (SELF, parse_config: the loop's callers)
    POLICY,
    SELF,
    LeagueConfig,
    TrainingGame,
    config_dict,
    eval_games,
    load_config,
    parse_config,
)
from training.exploiter import Exploiter, exploiter_every
from training.league import League
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.restarts import Position, RestartBuffer
from training.sections import Matches, PolicyModel


class Opponents:
    """Agents for league opponents: bots by spec; snapshots share one frozen module.

    Every snapshot's weights are read from disk once and kept in memory (CPU tensors in the
    module's dtype; a LoRA run's snapshots are its adapters only, a few MB each). One
    frozen copy of the base model plays them all: before a snapshot's batched call its
    weights are copied into that module (`_activate`), which costs a few milliseconds where
    building a model from disk cost a second. The values are the ones on disk, so a
    resumed run plays its snapshots exactly as the uninterrupted one.
    """

    def __init__(self, policy: PolicyModel, games: list[TrainingGame], device, dtype: str = "auto"):
        self.policy, self.games, self.device, self.dtype = policy, games, device, dtype
        self._bots: dict[str, Any] = {}
        self._weights: dict[str, dict[str, torch.Tensor]] = {}  # snapshot file -> its tensors
        self._backend = None  # the shared TransformersBackend
        self._active: str | None = None  # the snapshot whose weights the module holds

    def agent(self, name: str, spec: str, kind: str, seed: int):
        if kind == "bot":
            if name not in self._bots:
                every = exploiter_every(spec)
                self._bots[name] = (
                    make_agent(spec, name)
                    if every is None
                    else Exploiter([(g.name, g.params) for g in self.games], every, name)
                )
            return self._bots[name]
        return LLMAgent(
            name, _SnapshotBackend(self, spec, name), replace(self.policy.agent, seed=seed)
        )

    def refresh_exploiters(self, league: League, backend, step: int) -> None:
        """Each exploiter of the league (`training.exploiter`) walks the greedy play of the
        policy in `backend` when its walk is due at `step`, whether or not it plays this step."""
        for o in league.opponents:
            if o.kind == "bot" and exploiter_every(o.spec) is not None:
                greedy = LLMAgent(POLICY, backend, replace(self.policy.agent, temperature=0.0))
                self.agent(o.name, o.spec, o.kind, 0).refresh(greedy, step)

    def forget(self, keep: set[str]) -> None:
        """Drop the snapshots (by file) that left the league."""
        for path in [p for p in self._weights if p not in keep]:
            del self._weights[path]
            if self._active == path:
                self._active = None

    def _activate(self, path: str):
        """The shared backend, holding snapshot `path`'s weights."""
        if self._backend is None:
            self._backend = self._build()
        if self._active != path:
            model = self._backend.model
            if path not in self._weights:
                self._weights[path] = self._read(path, model)
            with torch.no_grad():
                model.load_state_dict(self._weights[path], strict=False)  # checked to fit in _read
            self._active = path
        return self._backend

    def _build(self):
        return frozen_backend(
            self.policy.model,
            self.policy.learner,
            str(self.device),
            self.dtype,
            max_batch_size=self.policy.backend_kwargs.get("max_batch_size", 256),
        )

    def _read(self, path: str, model) -> dict[str, torch.Tensor]:
        own = model.state_dict()
        loaded = load_file(path, device=str(self.device))
        unexpected = sorted(set(loaded) - set(own))
        expected = {
            k
            for k in own
            if ("lora_" in k) == (self.policy.learner.lora_rank > 0)
            and not k.endswith("lm_head.weight")
        }
        missing = sorted(expected - set(loaded))
        if unexpected or missing:
            what = "LoRA adapters" if self.policy.learner.lora_rank > 0 else "full weights"
            raise ValueError(
                f"league snapshot {path} does not fit {self.policy.model} with {what}: missing {missing[:3]}, unexpected {unexpected[:3]}"
            )
        return {k: v.to(own[k].dtype) for k, v in loaded.items()}


def frozen_backend(
    model_name: str,
    lcfg: LearnerConfig,
    device: str,
    dtype: str = "auto",
    name: str | None = None,
    roles: tuple[str, ...] = (),
    **kwargs,
):
    """A TransformersBackend on a fresh, frozen copy of the policy's model (LoRA-wrapped like the
    learner's: one adapter per role of a per-role run) for weights loaded into it later: the
    league snapshots' module, a Ray rollout worker's policy."""
    model, tok = load_model(model_name, dtype=dtype, device=device)
    if lcfg.lora_rank > 0:
        c = lcfg
        model = lora_model(model, c.lora_rank, c.lora_alpha, c.lora_targets, c.lora_dropout, roles)
    model.eval()  # a frozen lm_head is fine: the backend takes last-token logits by index (one mm)
    return TransformersBackend((model, tok), name=name, **kwargs)


class _SnapshotBackend:
    """One snapshot's view of the shared opponent module: the backend its LLMAgent calls."""

    def __init__(self, pool: Opponents, path: str, name: str):
        self.pool, self.path, self.name = pool, path, name

    def generate(self, conversations, params, allowed=None):
        return self.pool._activate(self.path).generate(conversations, params, allowed)

    def move_distributions(self, conversations, allowed, temperature):
        return self.pool._activate(self.path).move_distributions(
            conversations, allowed, temperature
        )


def save_snapshot(learner: Learner, path: Path) -> None:
    """The policy's trainable weights as one safetensors file: a LoRA run's adapters, else the
    whole model (tied copies dropped)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = checkpoint.tmp_path(path)
    try:
        with checkpoint.writing(path):
            save_file(trainable_state(learner.model, learner.cfg.lora_rank > 0), str(tmp))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def trainable_state(model, lora: bool) -> dict[str, torch.Tensor]:
    """A module's weights as CPU tensors: a LoRA model's adapters only, else all of them (tied copies once)."""
    state = model.state_dict()
    if lora:
        state = {k: v for k, v in state.items() if "lora_" in k}
    seen, out = set(), {}
    for k, v in state.items():
        if v.data_ptr() in seen:
            continue  # tied weights (lm_head = embeddings): stored once
        seen.add(v.data_ptr())
        out[k] = v.detach().contiguous().cpu()
    return out


def start_league(lcfg: LeagueConfig) -> League:
    """The league a fresh run starts with: the `league` section's bots (snapshots join as the run takes them)."""
    league = League(
        weighting=lcfg.weighting,
        decay=lcfg.decay,
        max_checkpoints=lcfg.max_checkpoints,
    )
    for spec in lcfg.bots:
        league.add(spec, "bot", spec)
    return league


def plan_step(
    matches: Matches,
    lcfg: LeagueConfig,
    league: League,
    rng: np.random.Generator,
    step: int,
    restarts: RestartBuffer | None = None,
) -> list[tuple[MatchPlan, str | None]]:
    """This step's matches: (plan, league opponent or None for self-play), in pairs of seat orders;
    a `games[i].restarts` share of the self-play pairs start from a position in `restarts`.
    Self-play fills every seat with the policy; a league match gives the opponent
    `lcfg.opponent_seats` seats, rotating from match to match (`league_seats`)."""
    games_ = matches.games
    pairs = matches.matches_per_step // 2
    n_self = round(lcfg.self_play * pairs) if league.opponents else pairs
    weights = np.array([g.weight for g in games_], dtype=float)
    game_idx = rng.choice(len(games_), size=pairs, p=weights / weights.sum())
    opponents = [None] * n_self + (
        league.sample(rng, pairs - n_self, max_checkpoints=lcfg.max_loaded)
        if pairs > n_self
        else []
    )
    seeds = rng.integers(0, 2**31 - 1, size=pairs)
    starts = _restart_positions([games_[i] for i in game_idx[:n_self]], rng, restarts)
    out = []
    for j in range(pairs):
        h = _branch_head(j, n_self, games_[game_idx[j]].branch)
        gi, opp = game_idx[h], opponents[h]
        g = games_[gi]
        names = [POLICY] if opp is None else [POLICY, opp]
        for order, plan in enumerate(
            plan_matches(
                g.name,
                names,
                2,
                seed=int(seeds[j]),
                params=g.params,
                prefix=f"s{step}p{j}m",
                opening=g.opening if opp is None else 0,
            )
        ):
            if opp is not None:  # the opponent's seats rotate: pair j's two matches, 2j and 2j + 1
                plan.seats = league_seats(len(plan.seats), lcfg.opponent_seats, opp, 2 * j + order)
            plan.seed = int(
                seeds[h]
            )  # both seat orders of a pair (and its branch group) play the same deal and opening
            if h in starts:  # the lost match's deal and moves
                plan.seed, plan.start, plan.opening, plan.explore = (
                    starts[h].seed,
                    starts[h].actions,
                    0,
                    g.restart_explore,
                )
            out.append((plan, opp))
    return out


def _restart_positions(
    self_play: list[TrainingGame], rng: np.random.Generator, restarts: RestartBuffer | None
) -> dict[int, Position]:
    """Branch head -> the restart position its group starts from, for the self-play pairs (their
    games in pair order); draws only for a game with `restarts`."""
    starts = {}
    for j, g in enumerate(self_play):
        if (
            g.restarts
            and restarts is not None
            and _branch_head(j, len(self_play), g.branch) == j
            and rng.random() < g.restarts
        ):
            pos = restarts.sample(g.name, g.params, rng)
            if pos is not None:
                starts[j] = pos
    return starts


def league_seats(players: int, opponent_seats: int, opponent: str, rotation: int) -> list[str]:
    """The seats of a league match: `opponent` in `opponent_seats` of the `players` seats, the
    policy in the others. The line-up [policy x (players - opponent_seats), opponent x
    opponent_seats] turns right by `rotation` seats, so consecutive matches put the opponent in
    every seat in turn; two players, rotation 0 and 1: [policy, opponent], [opponent, policy].
    """
    if not 1 <= opponent_seats < players:
        raise ValueError(
            f"league.opponent_seats must be in [1, {players - 1}] for a game of {players} players, got {opponent_seats}"
        )
    lineup = [POLICY] * (players - opponent_seats) + [opponent] * opponent_seats
    return [lineup[(i - rotation) % players] for i in range(players)]


def play_step(planned: list, agents: dict, matches: Matches, progress=None) -> list:
    """A step's planned matches (`plan_step`'s (plan, opponent) pairs) played by `agents`
    (`arena.runner.play`), the records in match-id order: completion order varies with timing,
    a step's batch must not. With `matches.prompt_cache` the policy's backend keeps each distinct
    prompt's prefill for the step; its prefix cache is emptied after the step's matches."""
    backend = getattr(agents.get(POLICY), "backend", None)
    cache = (
        backend.prompt_cache()
        if matches.prompt_cache and hasattr(backend, "prompt_cache")
        else contextlib.nullcontext()
    )
    try:
        with cache:  # `play` yields as matches end: all of them are played inside the block
            return sorted(
                play(
                    [p for p, _ in planned],
                    agents,
                    concurrency=matches.concurrency,
                    max_turns=matches.max_turns,
                    progress=progress,
                ),
                key=lambda r: r.match_id,
            )
    finally:  # the weights change next: free the prefix cache's memory for the learner now
        if hasattr(backend, "clear_prefix_cache"):
            backend.clear_prefix_cache()


def _branch_head(j: int, n_self: int, branch: int) -> int:
    """The first pair of pair j's branch group: groups of `branch` consecutive pairs, self-play
    pairs (the first n_self) and league pairs grouped apart."""
    start = 0 if j < n_self else n_self
    return j - (j - start) % max(1, branch)


def step_lineup(
    league: League, planned: list[tuple[MatchPlan, str | None]], rng: np.random.Generator
) -> list[tuple[str, str, str, int]]:
    """The step's agents as (name, spec, kind, sampling seed): the policy, then its opponents by name."""
    lineup = [(POLICY, "", "policy", int(rng.integers(2**31 - 1)))]
    for name in sorted({opp for _, opp in planned if opp is not None}):
        o = league.get(name)
        lineup.append((name, o.spec, o.kind, int(rng.integers(2**31 - 1))))
    return lineup


def step_agents(
    agent_cfg: LLMAgentConfig,
    backend,
    opponents: Opponents,
    lineup: list[tuple[str, str, str, int]],
) -> dict[str, Any]:
    """Agents by name for a `step_lineup`: the policy samples from `backend`."""
    return {
        name: LLMAgent(POLICY, backend, replace(agent_cfg, seed=seed))
        if kind == "policy"
        else opponents.agent(name, spec, kind, seed)
        for name, spec, kind, seed in lineup
    }
