"""LLM rollout tokens/s: the arena vs raw batched generation vs one match at a time, in fp32 and bf16.

    python bench/rollout_throughput.py                         # SmolLM2-135M, 48 matches, 16 live
    python bench/rollout_throughput.py --dtypes float32 bfloat16 --autocast --repeats 3
    python bench/rollout_throughput.py --model tiny-llama --quick

For every weights dtype (`--dtypes`, each its own `TransformersBackend`), in one run:

- arena     `arena.runner.play`: `--matches` tic-tac-toe matches through a queue, at most
            `--concurrency` live at once (a new match starts as soon as one ends, so the
            batch stays full until the queue runs dry); the LLM (free text, random
            fallback, no retries) in both seats, so every live match has an LLM turn
            pending; every step the pending turns of all matches go to the backend as one batch.
- raw       the exact batches the arena sent (same conversations, same sizes, same
            sampling seeds), replayed straight into `backend.generate`: the ceiling.
- serial    the first `--serial-matches` of the same matches with `concurrency=1`.
- `--whole-prompts`: the arena again with prefix sharing off (every prompt prefilled whole).
- `--autocast`: the arena on the fp32 weights under bf16 autocast (what a learner's fp32
            module would run; autocast re-casts every weight on every call).
- `--unpacked`: the bf16 arena with the backend's weight prepacking off (`agents.packed_linear`;
            bf16 decodes on prepacked oneDNN weights by default, same numbers).

Throughput is completion tokens / wall seconds; tokens per CPU second (this process's CPU
time) is printed beside it, steadier than wall time on a machine shared with other work. MFU (model FLOPs utilisation,
`machine_limit.utilisation`): the FLOPs the model needed for the prompt and completion
tokens per second, over the matmul FLOP/s of its dtype measured in the same run.
Targets: arena >= 0.9x raw, arena >= 5x serial, arena bf16 >= 2.5x fp32.
Beside the last two it prints what the model's own weight matmuls allow at the batch's mean
rows (`machine_limit.decode_flops`, bf16 on prepacked weights as the backend runs them): bf16
over fp32 at that many rows, and that many rows over one row (a token decoded alone is memory-bound).
Legal-move rate: the share of LLM turns whose reply was a legal move (no fallback), for
the same matches (same seeds) in each dtype: bf16 must not make the model worse.
`--repeats 3` measures every path three times, interleaved in rotating order, and compares
medians (a shared machine's speed drifts from minute to minute with other work).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine_limit, run as a script or loaded

from machine_limit import decode_flops, utilisation
from machine_limit import measure as measure_machine

from agents.backend import SamplingParams
from agents.llm_agent import LLMAgent, LLMAgentConfig
from agents.packed_linear import can_pack
from agents.transformers_backend import TransformersBackend
from arena.runner import plan_matches, play
from core.machine import set_threads


class CountingBackend:
    """Passes calls through, counts prompt tokens, and remembers each batch (for the raw replay)
    when `record` is set; `autocast` runs the calls under bf16 autocast."""

    def __init__(self, backend, record: bool = False, autocast: bool = False):
        self.backend, self.name, self.record, self.autocast = (
            backend,
            backend.name,
            record,
            autocast,
        )
        self.calls: list[tuple[list, SamplingParams, list | None]] = []
        self.prompt_tokens = 0

    def generate(self, conversations, params, allowed=None):
        if self.record:
            self.calls.append((conversations, params, allowed))
        context = torch_autocast() if self.autocast else contextlib.nullcontext()
        with context:
            gens = self.backend.generate(conversations, params, allowed)
        self.prompt_tokens += sum(len(g.prompt_token_ids) for g in gens)
        return gens


def torch_autocast():
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16)


def run_arena(
    backend, matches: int, concurrency: int, max_new_tokens: int, opponent: str = "self"
) -> dict:
    config = LLMAgentConfig(
        max_new_tokens=max_new_tokens, temperature=0.7, max_retries=0, fallback="random", seed=0
    )
    from agents.bots import RandomAgent

    agents = {"llm": LLMAgent("llm", backend, config), "random": RandomAgent("random")}
    plans = plan_matches(
        "tic_tac_toe", ["llm", "llm" if opponent == "self" else "random"], matches, seed=0
    )
    prompt_before = backend.prompt_tokens
    start, cpu = time.perf_counter(), time.process_time()
    records = list(play(plans, agents, concurrency=concurrency))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    turns = [t for r in records for t in r.turns if t.agent == "llm"]
    return {
        "tokens": sum(r.completion_tokens for r in records),
        "seconds": seconds,
        "cpu": cpu,
        "prompt_tokens": backend.prompt_tokens - prompt_before,
        "legal": sum(t.fallback is None and t.valid for t in turns),
        "turns": len(turns),
    }


def run_raw(backend, calls) -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    gens = [g for conv, params, allowed in calls for g in backend.generate(conv, params, allowed)]
    return {
        "tokens": sum(len(g.token_ids) for g in gens),
        "seconds": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "prompt_tokens": sum(len(g.prompt_token_ids) for g in gens),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument(
        "--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"]
    )
    p.add_argument("--matches", type=int, default=48, help="matches in the arena's queue")
    p.add_argument(
        "--concurrency", type=int, default=16, help="matches live at once on the arena path"
    )
    p.add_argument(
        "--serial-matches",
        type=int,
        default=4,
        help="matches played one at a time (a rate: fewer suffice)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=64,
        help="new tokens a turn at most (the LLM agent default)",
    )
    p.add_argument("--opponent", choices=["self", "random"], default="self")
    p.add_argument(
        "--whole-prompts", action="store_true", help="also the arena with prefix sharing off"
    )
    p.add_argument(
        "--autocast", action="store_true", help="also the arena on fp32 weights under bf16 autocast"
    )
    p.add_argument(
        "--unpacked",
        action="store_true",
        help="also the bf16 arena without prepacked weights (agents.packed_linear)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: chosen from the CPUs and the load)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measure every path this many times, interleaved in rotating order; report medians",
    )
    p.add_argument(
        "--quick", action="store_true", help="6 matches, 3 live, 2 serial, 8 tokens (smoke run)"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.matches, args.concurrency, args.serial_matches, args.max_new_tokens = 6, 3, 2, 8
    set_threads(args.threads)

    backends = {dt: TransformersBackend(args.model, dtype=dt) for dt in args.dtypes}
    counting = {dt: CountingBackend(b) for dt, b in backends.items()}
    recorders = {dt: CountingBackend(b, record=True) for dt, b in backends.items()}
    for (
        b
    ) in counting.values():  # warm-up in the measured batch shapes: first calls pay for allocations
        run_arena(b, args.concurrency, args.concurrency, 2)

    paths = [(dt, kind) for dt in args.dtypes for kind in ("arena", "raw batched", "one at a time")]
    if args.whole_prompts:
        paths += [(dt, "arena, whole prompts") for dt in args.dtypes]
    if args.autocast and "float32" in backends:
        paths.append(("float32", "arena, bf16 autocast"))
    if args.unpacked and "bfloat16" in backends:
        paths.append(("bfloat16", "arena, unpacked"))

    def measure(dt: str, kind: str) -> dict:
        arena = lambda b, n, c: run_arena(b, n, c, args.max_new_tokens, args.opponent)  # noqa: E731
        if kind == "arena":
            return arena(
                recorders[dt] if not recorders[dt].calls else counting[dt],
                args.matches,
                args.concurrency,
            )
        if kind == "raw batched":
            return run_raw(backends[dt], recorders[dt].calls)
        if kind == "one at a time":
            return arena(counting[dt], args.serial_matches, 1)
        if kind == "arena, bf16 autocast":
            return arena(
                CountingBackend(backends[dt], autocast=True), args.matches, args.concurrency
            )
        option = "pack_weights" if kind == "arena, unpacked" else "share_prefixes"
        setattr(backends[dt], option, False)
        try:
            return arena(counting[dt], args.matches, args.concurrency)
        finally:
            setattr(backends[dt], option, True)

    # The VM's speed drifts by up to 1.5x between minutes, so with --repeats every path is
    # measured in each round, the order rotating (a dtype's raw replay always after its first
    # arena run, which records the batches it replays), and medians are compared.
    runs: dict[tuple[str, str], list[dict]] = {path: [] for path in paths}
    for dt in args.dtypes:
        runs[(dt, "arena")].append(measure(dt, "arena"))
    for r in range(args.repeats):
        order = paths[r % len(paths) :] + paths[: r % len(paths)]
        for path in order:
            if r == 0 and path[1] == "arena":
                continue  # measured above
            runs[path].append(measure(*path))
    rate = {
        path: statistics.median(x["tokens"] / x["seconds"] for x in results)
        for path, results in runs.items()
    }
    cpu_rate = {
        path: statistics.median(x["tokens"] / x["cpu"] for x in results)
        for path, results in runs.items()
    }

    machine = measure_machine(args.model, seconds=1.0)
    prompt = sum(x["prompt_tokens"] for path in paths if path[1] == "arena" for x in runs[path])
    completion = sum(x["tokens"] for path in paths if path[1] == "arena" for x in runs[path])
    turns = sum(x["turns"] for path in paths if path[1] == "arena" for x in runs[path])
    context = round(
        (prompt + completion / 2) / max(1, turns)
    )  # mean tokens a generated token attends to
    config = backends[args.dtypes[0]].model.config

    def mfu(path) -> float:
        flops = machine["flops"]["bfloat16" if "autocast" in path[1] else path[0]]
        return statistics.median(
            utilisation(config, x["prompt_tokens"], x["tokens"], x["seconds"], context, flops)
            for x in runs[path]
        )

    from rich.console import Console
    from rich.table import Table

    load = os.getloadavg()[0]
    title = (
        f"{args.model}: {args.matches} tic-tac-toe matches, {args.concurrency} live, {machine['threads']} threads, "
        f"load {load:.1f}"
        + (f", median of {args.repeats} interleaved runs" if args.repeats > 1 else "")
    )
    table = Table(title=title)
    for col in (
        "dtype",
        "path",
        "completion tokens",
        "seconds",
        "tokens/s",
        "MFU",
        "each run",
        "tokens/CPU s",
    ):
        table.add_column(col, justify="left" if col in ("dtype", "path") else "right")
    for path, results in runs.items():
        table.add_row(
            path[0],
            path[1],
            str(results[0]["tokens"]),
            f"{statistics.median(x['seconds'] for x in results):.1f}",
            f"{rate[path]:.1f}",
            f"{mfu(path):.1%}",
            " ".join(f"{x['tokens'] / x['seconds']:.1f}" for x in results),
            f"{cpu_rate[path]:.1f}",
        )
    console = Console()
    console.print(table)
    f32, b16 = machine["flops"]["float32"], machine["flops"]["bfloat16"]
    console.print(
        f"MFU: the FLOPs the model needed (prompt tokens without the LM head, completion tokens with it, "
        f"mean context {context}) per second over matmul fp32 {f32 / 1e9:.0f} / bf16 {b16 / 1e9:.0f} GFLOP/s "
        f"(bench/machine_limit.py); prefix sharing can lift it above what the matmuls did"
    )
    decode: dict[
        tuple[int, str], float
    ] = {}  # (rows, dtype) -> the model's decode-matmul FLOP/s, each measured once

    def decode_rate(
        rows: int, dtype: str
    ) -> float:  # as the backend decodes: bf16 on prepacked weights where it packs
        if (rows, dtype) not in decode:
            decode[rows, dtype] = decode_flops(
                config, rows, dtype, packed=can_pack(backends[dtype].model)
            )
        return decode[rows, dtype]

    out: dict = {
        "tokens": {
            f"{dt} {kind}": [x["tokens"] for x in results] for (dt, kind), results in runs.items()
        },
        "mfu": {f"{dt} {kind}": mfu((dt, kind)) for dt, kind in runs},
    }
    for dt in args.dtypes:
        vs_raw, vs_serial = (
            rate[(dt, "arena")] / rate[(dt, "raw batched")],
            rate[(dt, "arena")] / rate[(dt, "one at a time")],
        )
        cpu_serial = cpu_rate[(dt, "arena")] / cpu_rate[(dt, "one at a time")]
        arena_runs = runs[(dt, "arena")]
        legal = sum(x["legal"] for x in arena_runs) / max(1, sum(x["turns"] for x in arena_runs))
        console.print(
            f"{dt}: arena / raw batched = {vs_raw:.2f}x (target >= 0.9x: {'met' if vs_raw >= 0.9 else 'MISSED'}); "
            f"arena / one at a time = {vs_serial:.2f}x (target >= 5x: {'met' if vs_serial >= 5 else 'MISSED'}; "
            f"per CPU second {cpu_serial:.2f}x); "
            f"legal moves {legal:.1%} of {arena_runs[0]['turns']} LLM turns"
        )
        sizes = [len(conv) for conv, _, _ in recorders[dt].calls]
        console.print(
            f"{dt}: {len(sizes)} batched calls, {sum(sizes) / len(sizes):.1f} rows each on average "
            f"({sum(sizes) / len(sizes) / args.concurrency:.0%} of the {args.concurrency} live matches)"
        )
        rows = max(1, round(sum(sizes) / len(sizes)))
        by_rows = decode_rate(rows, dt) / decode_rate(1, dt)
        console.print(
            f"{dt}: the model's decode matmuls run {by_rows:.2f}x faster a token at {rows} rows than at 1 "
            f"(machine_limit.decode_flops): what batching buys the matmuls alone"
        )
        out[dt] = {
            "vs_raw": vs_raw,
            "vs_serial": vs_serial,
            "legal": legal,
            "mean_batch": sum(sizes) / len(sizes),
            "matmuls_rows_vs_1": by_rows,
        }
    if {"float32", "bfloat16"} <= set(args.dtypes):
        speedup = rate[("bfloat16", "arena")] / rate[("float32", "arena")]
        by_cpu = cpu_rate[("bfloat16", "arena")] / cpu_rate[("float32", "arena")]
        rows = max(1, round(out["bfloat16"]["mean_batch"]))
        ceiling = decode_rate(rows, "bfloat16") / decode_rate(rows, "float32")
        console.print(
            f"arena bf16 / fp32 = {speedup:.2f}x  (target >= 2.5x: {'met' if speedup >= 2.5 else 'MISSED'}); "
            f"per CPU second {by_cpu:.2f}x; ceiling: the model's decode matmuls at the arena's {rows} rows "
            f"run {ceiling:.2f}x faster in bf16 (machine_limit.decode_flops), {speedup / ceiling:.0%} of it reached"
        )
        out["bf16_vs_fp32"], out["bf16_vs_fp32_ceiling"] = speedup, ceiling
    if ("bfloat16", "arena, unpacked") in rate:
        console.print(
            f"bf16 arena prepacked / unpacked = {rate[('bfloat16', 'arena')] / rate[('bfloat16', 'arena, unpacked')]:.2f}x "
            f"(per CPU second {cpu_rate[('bfloat16', 'arena')] / cpu_rate[('bfloat16', 'arena, unpacked')]:.2f}x)"
        )
    if ("float32", "arena, bf16 autocast") in rate:
        console.print(
            f"arena bf16 autocast over fp32 weights / fp32 = {rate[('float32', 'arena, bf16 autocast')] / rate[('float32', 'arena')]:.2f}x"
        )
    return out


if __name__ == "__main__":
    main()
