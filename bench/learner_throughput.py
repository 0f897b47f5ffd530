"""Learner step time in fp32 and bf16 (and vs a plain transformers training step), with peak memory.

    python bench/learner_throughput.py                       # SmolLM2-135M, 8 x ~160 tokens
    python bench/learner_throughput.py --shape recipe --repeats 2 --steps 1   # a train_mars_smollm2 step
    python bench/learner_throughput.py --model tiny-llama --quick

Two batch shapes (the same random token ids for every path):

- small (default): 8 sequences of a ~150-token prompt and a ~10-token completion, KL off;
- recipe: the step configs/train_mars_smollm2.yaml really takes. Its prompts carry the rules
  (270-360 tokens for tic-tac-toe and Kuhn poker, 720-850 for hanabi_mini; `RECIPE_PROMPTS`);
  its first steps train on 13-18 sequences (every match forfeited on a 12-token reply), a
  step of legal play on ~61 (40-80). `--sequences 16` (default) prompts sit at the quantiles
  of that mix, replies are 12 tokens, the loss has the recipe's KL (one more forward a
  micro-batch). Micro-batches are 1024 tokens instead of the recipe's 4096, to keep a path's
  peak RSS near 5 GB on a shared machine (`--micro-batch-tokens 4096` for the recipe's own).
  The whole step of legal play is then extrapolated: each learner path also times a
  one-sequence step (what any step costs: AdamW over the fp32 masters, the gradient casts,
  the bf16 copy's refresh), and a 61-sequence step costs that once plus the rest scaled by
  its tokens.

Paths (`--paths`, ';'-separated):

- plain             `model(input_ids, attention_mask, labels)` on the right-padded batch with
                    labels masked to the completion, `loss.backward()`, clip, `AdamW.step()`; fp32;
- plain, autocast   the same under bf16 autocast over the fp32 weights (the alternative the
                    learner's bf16 mode was measured against);
- learner fp32      `training.learner.Learner.step` (PPO loss, fused AdamW), precision float32;
- learner bf16      the same with precision bfloat16 (a bf16 copy computes, fp32 masters step);
- learner bf16, stochastic  the bf16 learner rounding the masters into its copy stochastically
                    (`bf16_rounding: stochastic`; not run by default);
- learner bf16, sdpa  the bf16 learner on the model's own sdpa attention instead of its
                    `bf16_eager_attention` (not run by default).

Each path runs in its own subprocess (so each peak RSS is its own), `--warmup` steps
first, then `--steps` timed steps; `--repeats N` runs every path N times in rotating order
and reports medians (the machine is shared; its speed drifts). Tokens/s counts prompt +
completion tokens; CPU seconds per step (the subprocess's CPU time) are steadier than wall
time on a shared machine. Every path process also measures the fp32 and bf16 matmul rates
under the load it ran in: their ratio is the ceiling of the bf16 / fp32 step ratio. MFU:
3x (4x with the KL's reference forward) the forward FLOPs the batch needs
(`machine_limit.utilisation`) per second over the matmul FLOP/s of the path's dtype.
Targets: learner fp32 >= 0.9x plain; learner bf16 >= 2x learner fp32.

Measured on a 2-core AMD EPYC (AVX-512 BF16), 1 thread, load 5.7-8.7 (so CPU seconds are
the trusted figure):
recipe, `--steps 1 --repeats 2`: fp32 104.8 / bf16 60.4 CPU s a step = 1.74x (1.74x wall),
against a matmul ratio of 2.26x; bf16 on the model's sdpa attention 66.5 CPU s. At load
1.9-5.2: 104.0 / 58.0 CPU s = 1.79x (1.81x wall), matmul ratio 2.23x. Small shape,
one run: fp32 12.0 / bf16 6.1 CPU s = 1.96x (2.52x wall), matmul ratio 2.30x.
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
    for _i in range(n):
        p = int(prompt_len + rng.integers(-10, 11))
        c = int(completion_len + rng.integers(-3, 4))
        rows.append(
            (
                rng.integers(100, vocab - 1, p).tolist(),
                rng.integers(100, vocab - 1, c).tolist(),
                float(rng.normal()),
            )
        )
    return rows


# Prompt lengths (SmolLM2 chat template, the rules in every prompt) of configs/train_mars_smollm2.yaml's
# policy turns: the 17 quantiles 0, 1/16, .., 1 of 980 turns from 16 steps of its matches played with
# random legal replies (tic-tac-toe and Kuhn poker ~270-360 tokens, hanabi_mini ~720-850).
RECIPE_PROMPTS = [
    270,
    279,
    282,
    286,
    289,
    293,
    296,
    341,
    356,
    359,
    723,
    748,
    762,
    774,
    785,
    804,
    850,
]
RECIPE_SEQUENCES = (
    61  # median sequences in such a step (40-80); the recipe's first real steps had 13-18
)
RECIPE_KL = (
    0.2  # the recipe's learner: k3 KL to a frozen reference (one more forward a micro-batch)
)


def recipe_batch(n: int, completion_len: int, vocab: int, seed: int = 0):
    """`n` sequences whose prompts sit at the quantiles (i + 0.5) / n of RECIPE_PROMPTS (the
    recipe's mix of short and long prompts, in proportion) with `completion_len`-token replies."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, len(RECIPE_PROMPTS))
    lengths = [int(np.interp((i + 0.5) / n, grid, RECIPE_PROMPTS)) for i in range(n)]
    return [
        (
            rng.integers(100, vocab - 1, p).tolist(),
            rng.integers(100, vocab - 1, completion_len).tolist(),
            float(rng.normal()),
        )
        for p in lengths
    ]


PATHS = (
    "plain",
    "plain, autocast",
    "learner fp32",
    "learner bf16",
    "learner bf16, sdpa",
    "learner bf16, stochastic",
)


def run_path(
    path: str,
    model_name: str,
    rows,
    warmup: int,
    steps: int,
    threads: int,
    kl_coef: float = 0.0,
    micro_batch_tokens: int = 8192,
    fixed_steps: int = 2,
) -> dict:
    """Time `steps` steps of `path` on `rows` (after `warmup`), then (learner paths) `fixed_steps`
    steps of a one-sequence batch: what a step costs whatever its size (AdamW, casts, the bf16
    copy's refresh); then both matmul rates, measured in this process under the same load."""
    import contextlib

    import torch

    from agents.models import load_model
    from core.machine import matmul_flops, set_threads

    set_threads(threads, verbose=False)
    torch.manual_seed(0)
    model, tok = load_model(model_name, dtype="float32")
    model.train()
    tokens = sum(len(p) + len(c) for p, c, _ in rows)
    if path.startswith("learner"):
        from training.learner import Learner, LearnerConfig, Sequence
        from training.loss import LossConfig

        precision = "bfloat16" if "bf16" in path else "float32"
        learner = Learner(
            model,
            tok,
            LearnerConfig(
                lr=1e-5,
                loss=LossConfig(kl_coef=kl_coef),
                precision=precision,
                micro_batch_tokens=micro_batch_tokens,
                bf16_rounding="stochastic" if path.endswith("stochastic") else "nearest",
            ),
        )
        if path.endswith("sdpa"):
            learner.attention = (
                None  # the module's own (sdpa) attention, as before the learner had its bf16 one
            )
        seqs = [Sequence(p, c, a) for p, c, a in rows]
        one = [Sequence(rows[0][0][:16], rows[0][1][:1], 1.0)]
        learner.step(one)  # the optimizer's state and the kernels, before anything is timed

        def step(batch=seqs):
            learner.step(batch)
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
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if path.endswith("autocast")
            else contextlib.nullcontext()
        )

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
    out = {
        "tokens_per_s": tokens * steps / seconds,
        "seconds_per_step": seconds / steps,
        "cpu_per_step": cpu / steps,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if path.startswith("learner") and fixed_steps:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(fixed_steps):
            step(one)
        out.update(
            fixed_per_step=(time.perf_counter() - start) / fixed_steps,
            fixed_cpu_per_step=(time.process_time() - cpu) / fixed_steps,
        )
    out.update({f"matmul_{dt}": matmul_flops(dt, seconds=0.5) for dt in ("float32", "bfloat16")})
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument(
        "--shape",
        choices=("small", "recipe"),
        default="small",
        help="small: 8 x ~160 tokens, KL off; recipe: a train_mars_smollm2 step (prompts 270-850 tokens, KL 0.2)",
    )
    p.add_argument("--sequences", type=int, help="sequences a step (default: small 8, recipe 16)")
    p.add_argument("--prompt-len", type=int, default=150, help="small shape: mean prompt tokens")
    p.add_argument(
        "--completion-len", type=int, help="completion tokens (default: small ~10, recipe 12)"
    )
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        help="learner micro-batch (default: small 8192, recipe 1024)",
    )
    p.add_argument(
        "--paths",
        help="';'-separated subset of: "
        + "; ".join(PATHS)
        + " (default: small the first four, recipe the learner's two)",
    )
    p.add_argument(
        "--warmup", type=int, help="untimed steps on the batch first (default: small 1, recipe 0)"
    )
    p.add_argument("--steps", type=int, default=3)
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every path this many times, in rotating order; report medians",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: chosen from the CPUs and the load, once for all paths)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, one timed step")
    p.add_argument("--_path", help=argparse.SUPPRESS)  # internal: run one path in this process
    args = p.parse_args(argv)
    recipe = args.shape == "recipe"
    defaults = {
        "sequences": 16 if recipe else 8,
        "completion_len": 12 if recipe else 10,
        "micro_batch_tokens": 1024 if recipe else 8192,
        "warmup": 0 if recipe else 1,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.quick:
        args.sequences, args.prompt_len, args.warmup, args.steps = 4, 40, 1, 1
    paths = (
        [x.strip() for x in args.paths.split(";")]
        if args.paths
        else list(PATHS[2:4] if recipe else PATHS[:4])
    )
    if unknown := [x for x in paths if x not in PATHS]:
        raise SystemExit(f"unknown path {unknown[0]!r}; the paths are: {', '.join(PATHS)}")
    kl = RECIPE_KL if recipe else 0.0
    rows = (
        recipe_batch(args.sequences, args.completion_len, vocab=49152)
        if recipe and not args.quick
        else batch(args.sequences, args.prompt_len, args.completion_len, vocab=49152)
    )
    if args._path:
        print(
            json.dumps(
                run_path(
                    args._path,
                    args.model,
                    rows,
                    args.warmup,
                    args.steps,
                    args.threads,
                    kl,
                    args.micro_batch_tokens,
                )
            )
        )
        return {}

    import os
    import statistics

    from machine_limit import model_config, utilisation

    from core.machine import set_threads

    threads = set_threads(args.threads)  # chosen once here, so every path runs on the same count
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    runs: dict[str, list[dict]] = {path: [] for path in paths}
    loads = [os.getloadavg()[0]]
    for r in range(args.repeats):
        for path in paths[r % len(paths) :] + paths[: r % len(paths)]:
            cmd = [sys.executable, __file__, *passed, "--threads", str(threads), "--_path", path]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{path} path failed: {out.stderr.strip().splitlines()[-1]}")
            runs[path].append(json.loads(out.stdout.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    results = {
        path: {key: statistics.median(x[key] for x in rs) for key in rs[0]}
        for path, rs in runs.items()
    }
    matmul = {
        dt: statistics.median(x[f"matmul_{dt}"] for rs in runs.values() for x in rs)
        for dt in ("float32", "bfloat16")
    }

    prompt, completion = sum(len(p) for p, _, _ in rows), sum(len(c) for _, c, _ in rows)
    context = round((prompt + completion) / len(rows) / 2)  # mean tokens a token attends to
    config = model_config(args.model)
    passes = 3 + (
        kl > 0
    )  # forward + backward (2 forwards' worth), and the reference's forward for the KL

    def mfu(path: str) -> float:
        flops = matmul["float32" if path in ("plain", "learner fp32") else "bfloat16"]
        return utilisation(
            config,
            prompt,
            completion,
            results[path]["seconds_per_step"],
            context,
            flops,
            passes=passes,
        )

    from rich.console import Console
    from rich.table import Table

    what = (
        f"recipe-shaped step (train_mars_smollm2: prompts {min(len(p) for p, _, _ in rows)}-{max(len(p) for p, _, _ in rows)} "
        f"tokens, {args.completion_len}-token replies, KL {kl}, micro-batches of {args.micro_batch_tokens} tokens)"
        if recipe
        else f"~{args.prompt_len + args.completion_len} tokens"
    )
    table = Table(
        title=f"{args.model}: {len(rows)} sequences, {prompt + completion} tokens, {what}, {args.steps} timed steps, "
        f"{threads} threads, load {min(loads):.1f}-{max(loads):.1f}"
        + (f", median of {args.repeats} interleaved runs" if args.repeats > 1 else "")
    )
    for col in (
        "path",
        "tokens/s",
        "s/step",
        "CPU s/step",
        "fixed s/step",
        "MFU",
        "peak RSS MiB",
        "each run s/step (CPU)",
    ):
        table.add_column(col, justify="right" if col != "path" else "left")
    for path, r in results.items():
        fixed = (
            f"{r['fixed_per_step']:.2f} ({r['fixed_cpu_per_step']:.2f})"
            if "fixed_per_step" in r
            else "-"
        )
        table.add_row(
            path,
            f"{r['tokens_per_s']:.0f}",
            f"{r['seconds_per_step']:.2f}",
            f"{r['cpu_per_step']:.2f}",
            fixed,
            f"{mfu(path):.1%}",
            f"{r['peak_rss_mib']:.0f}",
            " ".join(f"{x['seconds_per_step']:.1f} ({x['cpu_per_step']:.1f})" for x in runs[path]),
        )
    console = Console()
    console.print(table)
    f32, b16 = matmul["float32"], matmul["bfloat16"]
    console.print(
        f"matmul (2048^2, median over the path processes): fp32 {f32 / 1e9:.0f} / bf16 {b16 / 1e9:.0f} GFLOP/s = "
        f"{b16 / f32:.2f}x, the ceiling of a bf16 / fp32 step ratio; MFU: {passes}x the batch's forward FLOPs "
        "per second over the path dtype's rate"
    )
    out = {"mfu": {path: mfu(path) for path in paths}, "matmul_ratio": b16 / f32, **results}
    rate = {path: r["tokens_per_s"] for path, r in results.items()}
    if {"plain", "learner fp32"} <= rate.keys():
        out["ratio"] = ratio = rate["learner fp32"] / rate["plain"]
        console.print(
            f"learner fp32 / plain = {ratio:.2f}x  (target >= 0.9x: {'met' if ratio >= 0.9 else 'MISSED'})"
        )
    if {"plain", "plain, autocast"} <= rate.keys():
        console.print(f"plain autocast / plain = {rate['plain, autocast'] / rate['plain']:.2f}x")
    if {"learner fp32", "learner bf16"} <= rate.keys():
        f, b = results["learner fp32"], results["learner bf16"]
        out["bf16_ratio"] = bf16 = rate["learner bf16"] / rate["learner fp32"]
        out["bf16_cpu_ratio"] = cpu_bf16 = f["cpu_per_step"] / b["cpu_per_step"]
        console.print(
            f"learner bf16 / learner fp32 = {bf16:.2f}x wall, {cpu_bf16:.2f}x per CPU second  "
            f"(target >= 2x: {'met' if min(bf16, cpu_bf16) >= 2 else 'MISSED'}; ceiling {b16 / f32:.2f}x)"
        )
        if "learner bf16, stochastic" in rate:
            stochastic = b["cpu_per_step"] / results["learner bf16, stochastic"]["cpu_per_step"]
            console.print(
                f"learner bf16, stochastic rounding / learner bf16 (nearest) = "
                f"{rate['learner bf16, stochastic'] / rate['learner bf16']:.2f}x wall, {stochastic:.2f}x per CPU second"
            )
        if "learner bf16, sdpa" in rate:
            sdpa = results["learner bf16, sdpa"]["cpu_per_step"] / b["cpu_per_step"]
            console.print(
                f"learner bf16 / learner bf16 with sdpa attention = {rate['learner bf16'] / rate['learner bf16, sdpa']:.2f}x wall, "
                f"{sdpa:.2f}x per CPU second"
            )
        if (
            recipe and not args.quick
        ):  # a whole step of legal play: the per-token part scaled, the fixed part once
            full = (
                RECIPE_SEQUENCES
                * (np.mean(RECIPE_PROMPTS) + args.completion_len)
                / (prompt + completion)
            )

            def whole(r: dict, key: str, fixed: str) -> float:
                return r[fixed] + (r[key] - r[fixed]) * full

            out["full_step"] = {
                path: whole(results[path], "cpu_per_step", "fixed_cpu_per_step")
                for path in ("learner fp32", "learner bf16")
            }
            wall = whole(f, "seconds_per_step", "fixed_per_step") / whole(
                b, "seconds_per_step", "fixed_per_step"
            )
            cpu = out["full_step"]["learner fp32"] / out["full_step"]["learner bf16"]
            console.print(
                f"a step of legal play ({RECIPE_SEQUENCES} sequences, {full:.1f}x these tokens; fixed costs once): "
                f"fp32 {out['full_step']['learner fp32']:.0f} / bf16 {out['full_step']['learner bf16']:.0f} CPU s "
                f"= {wall:.2f}x wall, {cpu:.2f}x per CPU second"
            )
    return out


if __name__ == "__main__":
    main()
