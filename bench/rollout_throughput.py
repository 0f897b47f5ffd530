"""LLM rollout tokens/s: the arena vs raw batched generation vs one match at a time.

    python bench/rollout_throughput.py                         # SmolLM2-135M, 16 matches
    python bench/rollout_throughput.py --model tiny-llama --quick

Three paths over the same model, in one run:

- arena     `arena.runner.play`: 16 tic-tac-toe matches live at once, the LLM (free text,
            random fallback, no retries) in both seats (self-play, so every live match
            has an LLM turn pending; `--opponent random` halves the batches); every step
            the pending LLM turns of all matches go to the backend as one batch.
- raw       the exact batches the arena sent (same conversations, same sizes, same
            sampling seeds), replayed straight into `backend.generate`: the ceiling.
- serial    the same 16 matches with `concurrency=1`: one match at a time.
- arena, whole prompts   the arena path again with the backend's prefix sharing off
            (`share_prefixes=False`): every prompt prefilled in full, to show what
            prefilling a batch's shared prompt prefixes once buys.

Throughput is completion tokens / wall seconds. Targets (issue 3): arena >= 0.9x raw,
arena >= 4x serial. `--repeats 3` measures every path three times, interleaved in rotating
order, and compares medians (this VM's speed drifts from minute to minute).
"""

from __future__ import annotations

import argparse
import statistics
import time

from agents.backend import SamplingParams
from agents.llm_agent import LLMAgent, LLMAgentConfig
from agents.transformers_backend import TransformersBackend
from arena.runner import plan_matches, play


class RecordingBackend:
    """Passes calls through and remembers each batch, for the raw replay."""

    def __init__(self, backend):
        self.backend, self.name = backend, backend.name
        self.calls: list[tuple[list, SamplingParams, list | None]] = []

    def generate(self, conversations, params, allowed=None):
        self.calls.append((conversations, params, allowed))
        return self.backend.generate(conversations, params, allowed)


def run_arena(backend, matches: int, concurrency: int, max_new_tokens: int, opponent: str = "self") -> tuple[int, float]:
    config = LLMAgentConfig(max_new_tokens=max_new_tokens, temperature=0.7, max_retries=0, fallback="random", seed=0)
    from agents.bots import RandomAgent

    agents = {"llm": LLMAgent("llm", backend, config), "random": RandomAgent("random")}
    plans = plan_matches("tic_tac_toe", ["llm", "llm" if opponent == "self" else "random"], matches, seed=0)
    start = time.perf_counter()
    records = list(play(plans, agents, concurrency=concurrency))
    seconds = time.perf_counter() - start
    return sum(r.completion_tokens for r in records), seconds


def run_raw(backend, calls) -> tuple[int, float]:
    start = time.perf_counter()
    tokens = sum(len(g.token_ids) for conv, params, allowed in calls for g in backend.generate(conv, params, allowed))
    return tokens, time.perf_counter() - start


PATHS = ("arena", "raw batched", "one at a time", "arena, whole prompts")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--matches", type=int, default=16, help="matches, all live at once on the arena path")
    p.add_argument("--max-new-tokens", type=int, default=64, help="new tokens a turn at most (the LLM agent default)")
    p.add_argument("--opponent", choices=["self", "random"], default="self")
    p.add_argument("--repeats", type=int, default=1,
                   help="measure every path this many times, interleaved in rotating order; report medians")
    p.add_argument("--quick", action="store_true", help="4 matches, 8 tokens (smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.matches, args.max_new_tokens = 4, 8

    backend = TransformersBackend(args.model)
    run_arena(backend, args.matches, args.matches, 2)  # warm-up in the measured batch shapes: first calls pay for allocations
    recorder = RecordingBackend(backend)

    def measure(path: str) -> tuple[int, float]:
        if path == "arena":
            if recorder.calls:
                return run_arena(backend, args.matches, args.matches, args.max_new_tokens, args.opponent)
            return run_arena(recorder, args.matches, args.matches, args.max_new_tokens, args.opponent)
        if path == "raw batched":
            return run_raw(backend, recorder.calls)
        if path == "one at a time":
            return run_arena(backend, args.matches, 1, args.max_new_tokens, args.opponent)
        backend.share_prefixes = False
        try:
            return run_arena(backend, args.matches, args.matches, args.max_new_tokens, args.opponent)
        finally:
            backend.share_prefixes = True

    # The VM's speed drifts by up to 1.5x between minutes, so with --repeats every path is
    # measured in each round, the order rotating (raw always after the first arena run,
    # which records the batches it replays), and medians are compared.
    runs: dict[str, list[tuple[int, float]]] = {path: [] for path in PATHS}
    for r in range(args.repeats):
        order = PATHS[r % len(PATHS):] + PATHS[: r % len(PATHS)]
        for path in order:
            runs[path].append(measure(path))
    rates = {path: statistics.median(t / s for t, s in results) for path, results in runs.items()}

    from rich.console import Console
    from rich.table import Table

    sizes = [len(c) for c, _, _ in recorder.calls]
    title = f"{args.model}: {args.matches} tic-tac-toe matches, batches {sizes}"
    table = Table(title=title + (f", median of {args.repeats} interleaved runs" if args.repeats > 1 else ""))
    for col in ("path", "completion tokens", "seconds", "tokens/s", "each run"):
        table.add_column(col, justify="right" if col != "path" else "left")
    for path, results in runs.items():
        tokens, seconds = results[0][0], statistics.median(s for _, s in results)
        table.add_row(path, str(tokens), f"{seconds:.1f}", f"{rates[path]:.1f}", " ".join(f"{t / s:.1f}" for t, s in results))
    console = Console()
    console.print(table)
    vs_raw, vs_serial = rates["arena"] / rates["raw batched"], rates["arena"] / rates["one at a time"]
    console.print(f"arena / raw batched   = {vs_raw:.2f}x  (target >= 0.9x: {'met' if vs_raw >= 0.9 else 'MISSED'})")
    console.print(f"arena / one at a time = {vs_serial:.2f}x  (target >= 4x: {'met' if vs_serial >= 4 else 'MISSED'})")
    if args.repeats > 1:
        per_round = [runs["arena"][r][0] / runs["arena"][r][1] / (runs["one at a time"][r][0] / runs["one at a time"][r][1])
                     for r in range(args.repeats)]
        console.print("arena / one at a time in each round: " + " ".join(f"{x:.2f}x" for x in per_round))
    whole = rates["arena, whole prompts"]
    console.print(f"prefix sharing: arena {rates['arena']:.1f} vs whole prompts {whole:.1f} tokens/s = {rates['arena'] / whole:.2f}x")
    return {"vs_raw": vs_raw, "vs_serial": vs_serial, "tokens": {path: [t for t, _ in results] for path, results in runs.items()}}


if __name__ == "__main__":
    main()
