"""Matches on a Ray cluster: the `--ray ADDRESS` of `arena tournament`, `arena eval` and `arena play`.

    pool = RayPool.start("local", build=functools.partial(build_players, players))
    for record in pool.play(plans, out="run.jsonl"):   # MatchRecords, as `arena.runner.play` yields them
        ...

Workers: one `MatchWorker` actor per worker (`workers`, default one per cluster CPU over
`cpus` per worker; `gpus` per worker for local models), each built once with `build()`
(name -> Agent), so a model loads once per worker, not per match. A worker plays a chunk
of matches with `arena.runner.play` (an LLM agent batches its turns across the chunk's
matches) and returns their records.

The driver alone writes: it appends a chunk's records to the JSONL (one fsync) and then
yields each (the caller stores it), once per match id; a chunk whose worker died (its process killed, its node
gone) is played again on another worker, and a record for a match id already yielded is
dropped (at-least-once execution, exactly-once commit). The matches a dead worker had
finished in that chunk are played again, from their seeds: a match's result depends on
its plan only (bots draw from the match's generator, LLM agents sample with per-match
seeds), so not on the worker, the chunking or the finish order.

Within a call (a format round) the driver keeps `in_flight` (2) chunks queued on every
worker, so a worker never waits for the driver between chunks. A chunk is `concurrency`
matches (an LLM batches across them), smaller when the round is too short to give every
worker `in_flight` chunks: len(plans) / (2 x workers).

Ray: "local" starts a Ray instance in this process (`ray.init`, no dashboard); any other
address joins a running cluster (`ray start --head`, see docs/guides/ray.md). Workers import
this project: install it on every node (or run them from the same checkout).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from agents.by_game import build_agent
from arena.runner import MatchPlan, play
from core.machine import set_threads
from core.records import MatchRecord, check_jsonl_out

MAX_ATTEMPTS = 4  # a chunk whose workers die this many times stops the run


def connect(address: str, num_cpus: int | None = None) -> None:
    """Start ("local") or join (an address, "auto") Ray, once per process."""
    import ray  # optional: ray

    if ray.is_initialized():
        return
    # after an error the driver drops the other chunks' results unread: not errors to log again
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    if address == "local":
        ray.init(
            address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False
        )  # a new cluster even if another runs here
        return
    check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False)
    except ConnectionError as e:
        raise RuntimeError(
            f"cannot reach the Ray cluster at {address} ({e}); start it with `ray start --head` (docs/guides/ray.md)"
        ) from None


def check_reachable(address: str, timeout: float = 5) -> None:
    """A one-line RuntimeError now if nothing listens at HOST:PORT (Ray itself retries an
    unreachable head for minutes); other addresses ("auto", ray://) are left to Ray."""
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "//" not in host:
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except OSError as e:
            raise RuntimeError(
                f"cannot reach the Ray cluster at {address} ({e.strerror or e}); "
                f"start it with `ray start --head` (docs/guides/ray.md)"
            ) from None


class MatchWorker:
    """A Ray actor that holds its agents and plays chunks of matches."""

    def __init__(self, build: Callable[[], dict], threads: int):
        set_threads(threads, verbose=False)
        self.agents = build()

    def play(self, plans: list[MatchPlan], concurrency: int, max_turns: int) -> list[MatchRecord]:
        return list(play(plans, self.agents, concurrency=concurrency, max_turns=max_turns))

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        import ray  # optional: ray

        return ray.get_runtime_context().get_node_id()


@dataclass
class RayPool:
    """The match workers of one command (see the module doc)."""

    workers: list  # ActorHandles of MatchWorker
    in_flight: int = 2  # chunks queued per worker
    retried: int = 0  # chunks played again after their worker died
    dropped: int = 0  # records of a match id already yielded
    dead: set = field(default_factory=set)  # indices of workers that failed a chunk

    @classmethod
    def start(
        cls,
        address: str,
        build: Callable[[], dict],
        workers: int = 0,
        cpus: float = 1,
        gpus: float = 0,
        local_cpus: int | None = None,
        actor: type = MatchWorker,
    ) -> RayPool:
        """Connect to `address` and start the workers (`actor(build, threads)` each); `build`
        is pickled to each (a module-level function or a functools.partial of one; for a
        `training.ray_rollouts.RolloutWorker`, the train config and a dtype)."""
        import ray  # optional: ray
        from ray.exceptions import RayActorError  # optional: ray

        if workers < 0 or cpus <= 0 or gpus < 0:
            raise ValueError(
                f"need workers >= 0, cpus per worker > 0 and gpus >= 0; got {workers}, {cpus}, {gpus}"
            )
        connect(address, local_cpus)
        have = ray.cluster_resources()
        if gpus > have.get("GPU", 0):
            raise ValueError(
                f"--ray-gpus {gpus:g}: the cluster at {address} has {have.get('GPU', 0):g} GPU(s)"
            )
        if not workers:
            workers = max(1, int(have.get("CPU", 1) // cpus))
        actor = ray.remote(actor).options(
            num_cpus=cpus,
            num_gpus=gpus,
            max_restarts=-1,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        )
        handles = [actor.remote(build, max(1, int(cpus))) for _ in range(workers)]
        try:
            ray.get(
                [h.pid.remote() for h in handles]
            )  # agents built (models loaded) everywhere, or the first error
        except (
            RayActorError
        ) as e:  # building the agents raised (a bad spec): that error, in one line
            for h in handles:
                ray.kill(h, no_restart=True)
            raise RuntimeError(f"a Ray worker could not build its agents: {_cause(e)}") from None
        return cls(handles)

    def play(
        self,
        plans: list[MatchPlan],
        concurrency: int = 16,
        max_turns: int = 2000,
        out: str | None = None,
        progress=None,
        args: tuple = (),
    ) -> Iterator[MatchRecord]:
        """Play `plans` on the workers; yield each match's record once, as its chunk
        returns (appended to `out` first, when given). `args` go to every worker call
        after the chunk (a rollout worker's step: policy version and lineup)."""
        import ray  # optional: ray
        from ray.exceptions import RayError, RayTaskError  # optional: ray

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1 (matches live at once), got {concurrency}")
        if out:
            check_jsonl_out(out)
        todo = self._chunks(plans, concurrency)
        running: dict = {}  # ObjectRef -> (worker index, chunk, attempts)
        probes: dict = {}  # ObjectRef -> index of a failed worker, resolves once it is back (restarted)
        seen: set[str] = set()
        try:
            while todo or running:
                self._submit(todo, running, (concurrency, max_turns, *args))
                if not running:  # every worker is down: wait for one to come back
                    if not probes:
                        raise RuntimeError(
                            f"every Ray worker is dead; {sum(len(c) for c, _ in todo)} match(es) not played"
                        )
                    (ref,), _ = ray.wait(list(probes), num_returns=1)
                    self._probed(ref, probes)
                    continue
                (ref,), _ = ray.wait([*running, *probes], num_returns=1)
                if ref in probes:
                    self._probed(ref, probes)
                    continue
                w, chunk, attempts = running.pop(ref)
                try:
                    records = ray.get(ref)
                except RayTaskError as e:
                    # the agents raised: the caller's error, not a lost worker
                    raise (
                        e.cause if isinstance(e.cause, Exception) else e.as_instanceof_cause()
                    ) from None
                except RayError as e:
                    # the worker (or its node) died: play the chunk again on another
                    self._lost(w, chunk, attempts, e, todo, probes)
                    continue
                new = [r for r in records if r.match_id not in seen]
                self.dropped += len(records) - len(new)
                seen.update(r.match_id for r in new)
                if out and new:
                    append_records(out, new)
                for rec in new:
                    if progress is not None:
                        progress.update(1)
                    yield rec
        finally:  # an error, or the caller stopped early: drop the chunks still queued on the workers
            for ref in running:
                ray.cancel(ref)

    def _chunks(self, plans: list[MatchPlan], concurrency: int) -> list[tuple[list, int]]:
        """`plans` cut into chunks of `concurrency` matches, fewer when the round is too short to
        give every worker `in_flight` chunks; as (chunk, attempts), popped from the end."""
        size = max(
            1, min(concurrency, math.ceil(len(plans) / (self.in_flight * len(self.workers))))
        )
        return [(plans[i : i + size], 0) for i in range(0, len(plans), size)][::-1]

    def _submit(self, todo: list, running: dict, call: tuple) -> None:
        """Queue chunks from `todo` until every live worker has `in_flight` of them in `running`
        (ObjectRef -> (worker index, chunk, attempts)); `call` follows the chunk in the call."""
        for w in range(len(self.workers)):
            while (
                todo
                and w not in self.dead
                and sum(1 for v in running.values() if v[0] == w) < self.in_flight
            ):
                chunk, attempts = todo.pop()
                running[self.workers[w].play.remote(chunk, *call)] = (w, chunk, attempts)

    def _lost(self, w: int, chunk: list, attempts: int, e: Exception, todo: list, probes: dict):
        """Worker `w` died playing `chunk`: queue the chunk again and probe the worker until it
        is back; a RuntimeError once a chunk's workers died MAX_ATTEMPTS times."""
        if attempts + 1 >= MAX_ATTEMPTS:
            raise RuntimeError(
                f"Ray workers died {MAX_ATTEMPTS} times playing match {chunk[0].match_id!r} ({type(e).__name__})"
            ) from None
        self.retried += 1
        todo.append((chunk, attempts + 1))
        if w not in self.dead:
            self.dead.add(w)
            probes[self.workers[w].pid.remote()] = w

    def _probed(self, ref, probes: dict) -> None:
        """A failed worker's probe returned: back in the pool if it answered, probed again while it restarts."""
        import ray  # optional: ray
        from ray.exceptions import ActorUnavailableError, RayError  # optional: ray

        w = probes.pop(ref)
        try:
            ray.get(ref)
            self.dead.discard(w)
        except ActorUnavailableError:  # still restarting
            probes[self.workers[w].pid.remote()] = w
        except RayError:  # gone for good
            pass

    def worker_pids(self) -> list[int]:
        import ray  # optional: ray

        return ray.get([w.pid.remote() for w in self.workers])

    def shutdown(self) -> None:
        import ray  # optional: ray

        for w in self.workers:
            ray.kill(w)
        self.workers = []


def append_records(path: str, records: list[MatchRecord]) -> None:
    """Append a chunk's records with one fsync (`core.records.append_jsonl` syncs each record,
    several times slower: docs/results/benchmarks.md#machine-notes)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(rec.to_json() + "\n" for rec in records))
        f.flush()
        os.fsync(f.fileno())


def _cause(error: Exception) -> str:
    """The last line of the exception a remote error wraps (its own message)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    errors = [
        ln for ln in lines if ln.split(":", 1)[0].split(".")[-1].endswith(("Error", "Exception"))
    ]
    return (errors or lines or [type(error).__name__])[-1]


@dataclass(frozen=True)
class RayOptions:
    """Where and how a command plays its matches on Ray (`--ray ADDRESS`, `--ray-workers`,
    `--ray-cpus`, `--ray-gpus`)."""

    address: str
    """A cluster address, auto, or local to start one here."""
    workers: int = 0
    """Match workers (0: one per cluster CPU)."""
    cpus: float = 1
    """CPUs per worker (its torch threads)."""
    gpus: float = 0
    """GPUs per worker (for local models)."""


def start_pool(ray: RayOptions, build: Callable[[], dict]) -> RayPool:
    """Start the match workers `ray` asks for, each building its agents with `build`, and say so.

    Args:
        ray: the cluster address and the workers' number and size.
        build: called on each worker for its agents (name -> Agent).

    Returns:
        The started pool.
    """
    pool = RayPool.start(ray.address, build, ray.workers, ray.cpus, ray.gpus)
    print(
        f"ray: {len(pool.workers)} worker(s) at {ray.address}, {ray.cpus:g} CPU and {ray.gpus:g} GPU each"
    )
    return pool


def build_players(players: dict) -> dict:
    """Agents by player name from specs (a tournament's `players:`), built on a worker."""
    return {name: build_agent(name, spec) for name, spec in players.items()}
