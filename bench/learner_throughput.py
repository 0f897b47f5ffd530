"""Learner tokens/s vs a plain transformers training step on the same tokens, with peak memory.

    python bench/learner_throughput.py                       # SmolLM2-135M, 8 x ~160 tokens
    python bench/learner_throughput.py --model tiny-llama --quick

One batch of sequences shaped like a real rollout (a ~150-token prompt, a ~10-token
completion, an advantage each; the same random token ids for both paths) goes through:

- learner   `training.learner.Learner.step` (PPO loss, KL off, fp32 on CPU, fused AdamW);
- plain     `model(input_ids, attention_mask, labels)` on the right-padded batch with
            labels masked to the completion, `loss.backward()`, clip, `AdamW.step()`.

Each path runs in its own subprocess (so each peak RSS is its own), `--warmup` steps
first, then `--steps` timed steps. Tokens/s counts prompt + completion tokens.
Target (issue 5): learner >= 0.9x plain.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def batch(n: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        p = int(prompt_len + rng.integers(-10, 11))
        c = int(completion_len + rng.integers(-3, 4))
        rows.append((rng.integers(100, vocab - 1, p).tolist(), rng.integers(100, vocab - 1, c).tolist(), float(rng.normal())))
    return rows


def run_path(path: str, model_name: str, rows, warmup: int, steps: int) -> dict:
    import torch

    from agents.models import load_model

    torch.manual_seed(0)
    model, tok = load_model(model_name)
    model.train()
    tokens = sum(len(p) + len(c) for p, c, _ in rows)
    if path == "learner":
        from training.learner import Learner, LearnerConfig, Sequence
        from training.loss import LossConfig

        learner = Learner(model, tok, LearnerConfig(lr=1e-5, loss=LossConfig(kl_coef=0.0)))
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

        def step():
            opt.zero_grad(set_to_none=True)
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - start
    return {"tokens_per_s": tokens * steps / seconds, "seconds_per_step": seconds / steps,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sequences", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=150)
    p.add_argument("--completion-len", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one timed step")
    p.add_argument("--_path", help=argparse.SUPPRESS)  # internal: run one path in this process
    args = p.parse_args(argv)
    if args.quick:
        args.sequences, args.prompt_len, args.warmup, args.steps = 4, 40, 1, 1
    rows = batch(args.sequences, args.prompt_len, args.completion_len, vocab=49152)
    if args._path:
        print(json.dumps(run_path(args._path, args.model, rows, args.warmup, args.steps)))
        return {}

    results = {}
    for path in ("plain", "learner"):
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--_path", path]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{path} path failed: {out.stderr.strip().splitlines()[-1]}")
        results[path] = json.loads(out.stdout.strip().splitlines()[-1])

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.model}: {args.sequences} sequences x ~{args.prompt_len + args.completion_len} tokens, {args.steps} timed steps")
    for col in ("path", "tokens/s", "s/step", "peak RSS MiB"):
        table.add_column(col, justify="right" if col != "path" else "left")
    for path, r in results.items():
        table.add_row(path, f"{r['tokens_per_s']:.0f}", f"{r['seconds_per_step']:.2f}", f"{r['peak_rss_mib']:.0f}")
    console = Console()
    console.print(table)
    ratio = results["learner"]["tokens_per_s"] / results["plain"]["tokens_per_s"]
    console.print(f"learner / plain = {ratio:.2f}x  (target >= 0.9x: {'met' if ratio >= 0.9 else 'MISSED'})")
    return {"ratio": ratio, **results}


if __name__ == "__main__":
    main()
