"""Learner tokens/s in fp32 and bf16 vs a plain transformers training step, with peak memory.

    python bench/learner_throughput.py                       # SmolLM2-135M, 8 x ~160 tokens
    python bench/learner_throughput.py --repeats 3           # paths interleaved, medians
    python bench/learner_throughput.py --model tiny-llama --quick

One batch of sequences shaped like a real rollout (a ~150-token prompt, a ~10-token
completion, an advantage each; the same random token ids for every path) goes through:

- plain             `model(input_ids, attention_mask, labels)` on the right-padded batch with
                    labels masked to the completion, `loss.backward()`, clip, `AdamW.step()`; fp32;
- plain, autocast   the same under bf16 autocast over the fp32 weights (the alternative the
                    learner's bf16 mode was measured against);
- learner fp32      `training.learner.Learner.step` (PPO loss, KL off, fused AdamW), precision float32;
- learner bf16      the same with precision bfloat16 (a bf16 copy computes, fp32 masters step).

Each path runs in its own subprocess (so each peak RSS is its own), `--warmup` steps
first, then `--steps` timed steps; `--repeats N` runs every path N times in rotating order
and reports medians (the machine is shared; its speed drifts). Tokens/s counts prompt +
completion tokens; CPU seconds per step (the subprocess's CPU time) are steadier than wall
time on a shared machine. MFU: 3x the forward FLOPs the batch needs (`machine_limit.utilisation`)
per second over the matmul FLOP/s of the path's dtype, measured in this run.
Targets: learner fp32 >= 0.9x plain (issue 5); learner bf16 >= 2x learner fp32 (issue 18).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine_limit, run as a script or loaded


def batch(n: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        p = int(prompt_len + rng.integers(-10, 11))
        c = int(completion_len + rng.integers(-3, 4))
        rows.append((rng.integers(100, vocab - 1, p).tolist(), rng.integers(100, vocab - 1, c).tolist(), float(rng.normal())))
    return rows


PATHS = ("plain", "plain, autocast", "learner fp32", "learner bf16")


def run_path(path: str, model_name: str, rows, warmup: int, steps: int, threads: int) -> dict:
    import contextlib

    import torch

    from agents.models import load_model
    from arena.machine import set_threads

    set_threads(threads, verbose=False)
    torch.manual_seed(0)
    model, tok = load_model(model_name, dtype="float32")
    model.train()
    tokens = sum(len(p) + len(c) for p, c, _ in rows)
    if path.startswith("learner"):
        from training.learner import Learner, LearnerConfig, Sequence
        from training.loss import LossConfig

        precision = "bfloat16" if path.endswith("bf16") else "float32"
        learner = Learner(model, tok, LearnerConfig(lr=1e-5, loss=LossConfig(kl_coef=0.0), precision=precision))
        seqs = [Sequence(p, c, a) for p, c, a in rows]

        def step():
            learner.step(seqs)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        width = max(len(p) + len(c) for p, c, _ in rows)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.full((len(rows), width), pad)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100)
        for i, (p, c, _) in enumerate(rows):
            ids[i, : len(p) + len(c)] = torch.tensor(p + c)
            mask[i, : len(p) + len(c)] = 1
            labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if path.endswith("autocast") else contextlib.nullcontext()

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    for _ in range(warmup):
        step()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"tokens_per_s": tokens * steps / seconds, "seconds_per_step": seconds / steps, "cpu_per_step": cpu / steps,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sequences", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=150)
    p.add_argument("--completion-len", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1, help="run every path this many times, in rotating order; report medians")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: chosen from the CPUs and the load, once for all paths)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one timed step")
    p.add_argument("--_path", help=argparse.SUPPRESS)  # internal: run one path in this process
    args = p.parse_args(argv)
    if args.quick:
        args.sequences, args.prompt_len, args.warmup, args.steps = 4, 40, 1, 1
    rows = batch(args.sequences, args.prompt_len, args.completion_len, vocab=49152)
    if args._path:
        print(json.dumps(run_path(args._path, args.model, rows, args.warmup, args.steps, args.threads)))
        return {}

    import os
    import statistics

    from arena.machine import set_threads
    from machine_limit import measure as measure_machine, utilisation

    threads = set_threads(args.threads)  # chosen once here, so every path runs on the same count
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    runs: dict[str, list[dict]] = {path: [] for path in PATHS}
    for r in range(args.repeats):
        for path in PATHS[r % len(PATHS):] + PATHS[: r % len(PATHS)]:
            cmd = [sys.executable, __file__, *passed, "--threads", str(threads), "--_path", path]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{path} path failed: {out.stderr.strip().splitlines()[-1]}")
            runs[path].append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = {path: {key: statistics.median(x[key] for x in rs) for key in rs[0]} for path, rs in runs.items()}

    machine = measure_machine(args.model, seconds=1.0)
    prompt, completion = sum(len(p) for p, _, _ in rows), sum(len(c) for _, c, _ in rows)
    context = round((prompt + completion) / len(rows) / 2)  # mean tokens a token attends to
    from machine_limit import model_config

    config = model_config(args.model)

    def mfu(path: str) -> float:
        flops = machine["flops"]["float32" if path in ("plain", "learner fp32") else "bfloat16"]
        return utilisation(config, prompt, completion, results[path]["seconds_per_step"], context, flops, passes=3)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.model}: {args.sequences} sequences x ~{args.prompt_len + args.completion_len} tokens, "
                        f"{args.steps} timed steps, {threads} threads, load {os.getloadavg()[0]:.1f}"
                        + (f", median of {args.repeats} interleaved runs" if args.repeats > 1 else ""))
    for col in ("path", "tokens/s", "s/step", "CPU s/step", "MFU", "peak RSS MiB", "each run tokens/s"):
        table.add_column(col, justify="right" if col != "path" else "left")
    for path, r in results.items():
        table.add_row(path, f"{r['tokens_per_s']:.0f}", f"{r['seconds_per_step']:.2f}", f"{r['cpu_per_step']:.2f}", f"{mfu(path):.1%}",
                      f"{r['peak_rss_mib']:.0f}", " ".join(f"{x['tokens_per_s']:.0f}" for x in runs[path]))
    console = Console()
    console.print(table)
    f32, b16 = machine["flops"]["float32"], machine["flops"]["bfloat16"]
    console.print(f"MFU: 3x the batch's forward FLOPs per second over matmul fp32 {f32 / 1e9:.0f} / bf16 {b16 / 1e9:.0f} GFLOP/s")
    rate = {path: r["tokens_per_s"] for path, r in results.items()}
    ratio, bf16 = rate["learner fp32"] / rate["plain"], rate["learner bf16"] / rate["learner fp32"]
    console.print(f"learner fp32 / plain = {ratio:.2f}x  (target >= 0.9x: {'met' if ratio >= 0.9 else 'MISSED'})")
    cpu_bf16 = results["learner fp32"]["cpu_per_step"] / results["learner bf16"]["cpu_per_step"]
    console.print(f"learner bf16 / learner fp32 = {bf16:.2f}x  (target >= 2x: {'met' if bf16 >= 2 else 'MISSED'}; "
                  f"per CPU second {cpu_bf16:.2f}x); "
                  f"plain autocast / plain = {rate['plain, autocast'] / rate['plain']:.2f}x")
    return {"ratio": ratio, "bf16_ratio": bf16, "mfu": {path: mfu(path) for path in PATHS}, **results}


if __name__ == "__main__":
    main()
