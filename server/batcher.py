"""Micro-batching for `arena serve`: concurrent requests answered by one backend call.

    batcher = Batcher(backend, max_batch=64, batch_wait=0.01, max_queue=64)
    gens = await batcher.generate(request)      # in the server's event loop
    batcher.close()

One worker thread runs the (synchronous, e.g. torch) backend, so the event loop stays free
to take requests while it generates. The worker takes the first waiting request, collects
more for up to `batch_wait` seconds (or until `max_batch` completions), and answers them
with one backend call (`generate`, or `complete` for raw text prompts) per kind and
distinct set of sampling parameters. The `n` completions of a request are queued as one
item, so they are generated in one batch. When a batch fails, its completions are retried
one by one, so a single bad request cannot fail its neighbours.

The queue is bounded: `max_queue` requests waiting or generating at once; one more is
refused at once (RequestError 429) rather than queued.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import astuple, dataclass, field

from agents.backend import Backend, Generation, SamplingParams
from server.openai_api import Request, RequestError

log = logging.getLogger(__name__)


@dataclass
class _Job:
    """One completion to generate, and where its result goes."""

    kind: str  # "chat" or "text"
    prompt: list[dict] | str
    params: SamplingParams
    allowed: list[str] | None
    result: Future = field(default_factory=Future)  # a Generation or a RequestError


class Batcher:
    """Collects concurrent requests into batches for one backend (one worker thread).

    `generate` and `check_room` are called from the server's event loop (one thread), so
    the counters need no lock. `batches`, `largest_batch` and `peak_pending` are kept for
    monitoring (and tests).
    """

    def __init__(
        self, backend: Backend, max_batch: int = 64, batch_wait: float = 0.01, max_queue: int = 64
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if batch_wait < 0:
            raise ValueError(f"batch_wait must be >= 0 seconds, got {batch_wait}")
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        self.backend, self.max_batch, self.batch_wait = backend, max_batch, batch_wait
        self.max_queue = max_queue
        self.batches = 0  # backend calls made
        self.largest_batch = 0
        self.pending = 0  # requests waiting or generating
        self.peak_pending = 0
        self._queue: queue.Queue[list[_Job] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="serve-batcher", daemon=True)
        self._thread.start()

    async def generate(self, request: Request) -> list[Generation]:
        """`request.n` generations per prompt, prompt-major.

        Raises RequestError: 429 at once when `max_queue` requests are already waiting or
        generating; 400 when the backend refuses the request (ValueError), else 500.
        """
        self.check_room()
        self.pending += 1
        self.peak_pending = max(self.peak_pending, self.pending)
        try:
            jobs = [
                _Job(request.kind, p, request.params, request.allowed)
                for p in request.prompts
                for _ in range(request.n)
            ]
            self._queue.put(jobs)  # one item: a request's jobs are batched together
            return [await asyncio.wrap_future(j.result) for j in jobs]
        finally:
            self.pending -= 1

    def check_room(self) -> None:
        """Raises RequestError(429) when `max_queue` requests are waiting or generating."""
        if self.pending >= self.max_queue:
            raise RequestError(
                429,
                f"the server is busy: {self.pending} requests are queued (--max-queue {self.max_queue}); retry later",
            )

    def close(self) -> None:
        """Stop the worker once the requests queued before are answered."""
        self._queue.put(None)

    def _loop(self) -> None:
        while (jobs := self._queue.get()) is not None:
            jobs, stop = self._collect(jobs)
            groups: dict[tuple, list[_Job]] = {}
            for j in jobs:  # one backend call per kind and distinct sampling parameters
                groups.setdefault((j.kind, astuple(j.params)), []).append(j)
            for group in groups.values():
                self._run(group)
            if stop:
                return

    def _collect(self, jobs: list[_Job]) -> tuple[list[_Job], bool]:
        """`jobs` and those queued within `batch_wait` (up to `max_batch`); whether to stop."""
        deadline = time.monotonic() + self.batch_wait
        while len(jobs) < self.max_batch:
            try:
                more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if more is None:
                return jobs, True
            jobs = jobs + more
        return jobs, False

    def _run(self, jobs: list[_Job]) -> None:
        allowed = [j.allowed for j in jobs] if any(j.allowed for j in jobs) else None
        run = self.backend.generate if jobs[0].kind == "chat" else self.backend.complete
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(jobs))
        try:
            gens = run([j.prompt for j in jobs], jobs[0].params, allowed)
            if len(gens) != len(jobs):
                raise RuntimeError(
                    f"backend returned {len(gens)} generations for {len(jobs)} prompts"
                )
        except Exception as e:  # noqa: BLE001 - reported to the client
            if len(jobs) > 1:  # isolate the culprit: retry one by one
                for j in jobs:
                    self._run([j])
                return
            log.warning("backend failed: %s: %s", type(e).__name__, e)
            if isinstance(e, ValueError):  # the backend's own check of the request
                jobs[0].result.set_exception(RequestError(400, str(e)))
            else:
                error = RequestError(500, f"backend failed: {type(e).__name__}: {e}")
                jobs[0].result.set_exception(error)
            return
        for j, g in zip(jobs, gens):
            if g.finish_reason == "error":
                error = RequestError(500, f"backend returned an error generation: {g.error}")
                j.result.set_exception(error)
            else:
                j.result.set_result(g)
