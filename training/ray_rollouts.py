"""Self-play rollouts on Ray workers: the `ray:` section of a train config (docs/guides/ray.md).

    ray: {address: local, rollout_workers: 2, max_staleness: 0}

The learner stays in the driver (`arena train`); each `RolloutWorker` (a Ray actor, started
through `arena.ray_runner.RayPool`, so chunking, the replay of a dead worker's chunks and
the commit-once by match id are the tournaments') holds a frozen copy of the policy and the
league opponents. A step:

    driver   plan_step + step_lineup (the same draws from the loop's generator as in process)
    workers  load the step's policy version if they hold another, play their chunks
    driver   the records, sorted by match id -> advantages -> learner -> publish version `step`

Weight sync by version: after the update of step t the driver publishes version t, the
policy's weights in the rollout dtype (`rollouts.trainable_state` of the learner's compute
copy: all weights for full fine-tuning, the adapters only under LoRA) put once into Ray's
object store; every worker call names the version and its object, and a worker loads it
only when it holds another version (a restarted worker: at its first call). Every record
carries `policy_version`. Large models: see docs/guides/ray.md (vLLM's weight loading or a
checkpoint path on shared storage instead of the object store).

max_staleness 0: step t's matches are played with version t-1, after the update of step
t-1, as in process. max_staleness 1: step t+1's matches start (on version t-1) as soon as
step t's records are in, and play while the learner updates on them; every record is then
exactly one version behind (the first step after a start or a resume: none behind).

Device: a worker runs the policy where the config's `device` says (`worker_device`), as the
learner does in process; `device: cpu` keeps the rollouts off a GPU the worker could see.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from arena.ray_runner import MatchWorker, RayPool
from arena.runner import MatchPlan, play
from core.machine import compute_dtype, set_threads
from core.records import MatchRecord
from training.config import POLICY, LeagueConfig, RayConfig
from training.rollouts import (
    Opponents,
    frozen_backend,
    plan_step,
    step_agents,
    step_lineup,
    trainable_state,
)
from training.sections import Matches, PolicyModel


@dataclass
class RolloutStep:
    """What a worker call needs besides its chunk: the policy version and the step's agents."""

    version: int
    weights: list  # [ObjectRef of the version's state dict]: nested, so Ray passes the ref and the worker fetches it only when it changes
    lineup: list[tuple[str, str, str, int]]  # rollouts.step_lineup: (name, spec, kind, seed)
    keep: list[str]  # the league's snapshot files: a worker drops the weights of the others


@dataclass(frozen=True)
class WorkerSetup:
    """What a rollout worker is built from: the policy (its learner precision as the driver
    resolved it), the training games (for exploiters) and the snapshots' module dtype."""

    policy: PolicyModel
    games: list
    opponents_dtype: str


def worker_device(device: str, cuda_available: bool) -> str:
    """Where a rollout worker runs the policy: the config's `device`, read as the learner reads it.

    auto: cuda when this worker sees a GPU, else cpu. cuda and cuda:N: "cuda", the GPU Ray gave
    this worker (`ray.gpus`; Ray numbers a worker's GPUs from 0, so the driver's N means nothing
    there); ValueError when the worker sees none.
    """
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    if device.startswith("cuda"):
        if not cuda_available:
            raise ValueError(
                f"device {device}: this Ray rollout worker sees no GPU (give it one with ray.gpus, or set device: cpu)"
            )
        return "cuda"
    return device


class RolloutWorker(MatchWorker):
    """A Ray actor holding the policy (at some version) and the league opponents."""

    def __init__(self, setup: WorkerSetup, threads: int):
        set_threads(threads, verbose=False)
        policy = setup.policy  # dtypes as the driver resolved them (see RayRollouts.start)
        self.policy = policy
        device = worker_device(policy.device, torch.cuda.is_available())
        # the learner's compute copy is what samples in process: the same dtype here
        roles = {"seat_adapters": policy.seat_roles} if policy.seat_roles else {}
        self.backend = frozen_backend(
            policy.model,
            policy.learner,
            device,
            dtype=policy.learner.precision,
            name=POLICY,
            roles=policy.roles,  # per-role policies: each seat plays its role's adapter
            **{"max_batch_size": 256, **policy.backend_kwargs, **roles},
        )
        self.opponents = Opponents(policy, setup.games, self.backend.device, setup.opponents_dtype)
        self.version: int | None = None

    def play(
        self, plans: list[MatchPlan], concurrency: int, max_turns: int, step: RolloutStep
    ) -> list[MatchRecord]:
        import ray  # optional: ray

        if step.version != self.version:
            self.load(ray.get(step.weights[0]))
            self.version = step.version
        self.opponents.forget(set(step.keep))
        agents = step_agents(self.policy.agent, self.backend, self.opponents, step.lineup)
        records = list(play(plans, agents, concurrency=concurrency, max_turns=max_turns))
        for rec in records:
            rec.policy_version = step.version
        return records

    def load(self, weights: dict) -> None:
        with torch.no_grad():
            result = self.backend.model.load_state_dict(weights, strict=False)
        if result.unexpected_keys:
            raise ValueError(
                f"published weights do not fit {self.policy.model}: unexpected {result.unexpected_keys[:3]}"
            )


class RayRollouts:
    """The driver's side: the workers, the published version, the step started ahead (max_staleness 1)."""

    def __init__(self, matches: Matches, league_cfg: LeagueConfig, pool: RayPool):
        self.matches, self.league_cfg, self.pool = matches, league_cfg, pool
        self.version = -1
        self.weights: list = []
        self.sync_bytes = 0  # bytes of the last published version
        self.ahead: tuple[int, list, threading.Thread, dict] | None = (
            None  # (step, planned, thread, its result)
        )

    @classmethod
    def start(
        cls,
        r: RayConfig,
        policy: PolicyModel,
        matches: Matches,
        league_cfg: LeagueConfig,
        learner,
        version: int,
    ) -> RayRollouts:
        """Connect to `r.address`, start the workers and publish the learner's weights as `version`."""
        # the dtypes as chosen here (the learner's; "auto" for the snapshots' module): "auto" measured
        # again on a worker, under other load, could pick another and change the numerics
        on_workers = replace(
            policy, learner=replace(policy.learner, precision=learner.compute_dtype)
        )
        setup = WorkerSetup(on_workers, matches.games, compute_dtype("auto", learner.device.type))
        pool = RayPool.start(
            r.address, setup, r.rollout_workers, r.cpus, r.gpus, actor=RolloutWorker
        )
        pool.in_flight = (
            1  # one chunk per worker: an LLM's batches are its whole share of the step's matches
        )
        out = cls(matches, league_cfg, pool)
        out.publish(learner, version)
        return out

    def publish(self, learner, version: int) -> None:
        """Put the learner's current policy weights into the object store as `version`."""
        import ray  # optional: ray

        state = trainable_state(learner.policy, learner.cfg.lora_rank > 0)
        self.sync_bytes = sum(t.numel() * t.element_size() for t in state.values())
        self.weights = [ray.put(state)]
        self.version = version

    def collect(
        self, step: int, league, rng: np.random.Generator, restarts=None
    ) -> tuple[list[tuple[MatchPlan, str | None]], list[MatchRecord]]:
        """Step `step`'s (planned matches, records sorted by match id): the ones started ahead, or played now."""
        if self.ahead is None:
            self.start_step(step, league, rng, restarts)
        ahead_step, planned, thread, result = self.ahead
        self.ahead = None
        if ahead_step != step:
            raise RuntimeError(f"rollouts of step {ahead_step} were started, step {step} asked for")
        thread.join()
        if "error" in result:
            raise result["error"]
        return planned, sorted(result["records"], key=lambda r: r.match_id)

    def start_step(self, step: int, league, rng: np.random.Generator, restarts=None) -> None:
        """Plan step `step` now (the loop's draws) and play it on the workers in a background thread, on the current version;
        `restarts`: the loop's `training.restarts.RestartBuffer`."""
        planned = plan_step(self.matches, self.league_cfg, league, rng, step, restarts)
        lineup = step_lineup(league, planned, rng)
        keep = sorted(o.spec for o in league.opponents if o.kind == "checkpoint")
        args = (RolloutStep(self.version, self.weights, lineup, keep),)
        result: dict[str, Any] = {}

        def run():
            try:
                result["records"] = list(
                    self.pool.play(
                        [p for p, _ in planned],
                        self.matches.concurrency,
                        self.matches.max_turns,
                        args=args,
                    )
                )
            except BaseException as e:  # noqa: BLE001 (re-raised in the loop's thread by collect)
                result["error"] = e

        thread = threading.Thread(target=run, name=f"rollouts-step-{step}", daemon=True)
        thread.start()
        self.ahead = (step, planned, thread, result)

    def shutdown(self) -> None:
        self.pool.shutdown()
