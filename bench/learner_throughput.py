"""Learner step time: per sequence vs shared prefix, fp32 vs bf16, vs a plain transformers step.

    python bench/learner_throughput.py --shape recipe        # a train_mars_smollm2 step: shared prefix vs per sequence
    python bench/learner_throughput.py --shape multi_turn    # the same matches as growing conversations (MARS's mode)
    python bench/learner_throughput.py                       # SmolLM2-135M, 8 x ~160 random tokens, fp32 vs bf16
    python bench/learner_throughput.py --model tiny-llama --quick

Three batch shapes (the same sequences for every path of a run):

- recipe: the step configs/train_mars_smollm2.yaml takes, with its real prompts: its 12
  matches (`matches_per_step`) split evenly over its games (tic-tac-toe, Kuhn poker,
  hanabi_mini), played with the recipe's agent settings (`prompt: full`, `mode: fresh`,
  bracket answers) where every reply plays a uniformly random legal move (`[4] I pick this
  move because ...`, cut at the recipe's 12 `max_new_tokens`); each policy turn's prompt is
  the SmolLM2 chat template of what the agent sent, so prompts sit at the positions real
  matches reach and share what real prompts share. The learner has the recipe's KL (one
  more forward a micro-batch) and micro-batches (`micro_batch_tokens: 4096`);
- multi_turn: the same matches with `mode: multi_turn` (MARS's own mode: one growing chat per
  match and player; each turn's prompt is the whole conversation so far);
- small (default): 8 sequences of a ~150-token prompt of random token ids and a ~10-token
  completion, KL off (`--prompt-len`).

Paths (`--paths`, ';'-separated):

- plain             `model(input_ids, attention_mask, labels)` on the right-padded batch with
                    labels masked to the completion, `loss.backward()`, clip, `AdamW.step()`; fp32;
- plain, autocast   the same under bf16 autocast over the fp32 weights;
- learner fp32      `training.learner.Learner.step` (PPO loss, fused AdamW), precision float32,
                    one padded row per sequence (`shared_prefix: false`);
- learner bf16      the same with precision bfloat16 (a bf16 copy computes, fp32 masters step);
- per sequence      the learner at the recipe's `precision: auto` (bf16 on a CPU with AVX-512
                    BF16 or a GPU, else fp32), one padded row per sequence;
- shared prefix     the same learner with `shared_prefix: true`: each micro-batch is a prefix
                    tree and every token it shares is computed once (`training.prefix_tree`);
- learner bf16, stochastic  the bf16 learner rounding the masters stochastically (not by default);
- learner bf16, sdpa  the bf16 learner on the model's own sdpa attention (not by default).

Defaults: recipe and multi_turn run `per sequence;shared prefix`, small the first four.
Each path runs in its own subprocess (so each peak RSS is its own), `--warmup` steps
first, then `--steps` timed steps; `--repeats N` runs every path N times in rotating order
and reports medians (the machine is shared; its speed drifts). Tokens/s counts prompt +
completion tokens; CPU seconds per step (the subprocess's CPU time) are steadier than wall
time on a shared machine. Every path process also measures the fp32 and bf16 matmul rates
under the load it ran in. MFU: 3x (4x with the KL's reference forward) the forward FLOPs
(`core.machine.flops_per_token`: the weight matmuls, attention to every earlier token, the
LM head at completion positions) per second over the matmul FLOP/s of the path's dtype,
counted on every token of every sequence ("MFU") and on what the path computes ("MFU
computed": a shared prefix's tokens once, `Learner.computed_spans`; padding not counted).
The last line is the shared prefix / per sequence wall-time ratio; the line before it the
CPU-time ratio and both peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine_limit, run as a script or loaded

RECIPE = Path(__file__).resolve().parent.parent / "configs" / "train_mars_smollm2.yaml"
FILLER = " I pick this move because it looks like the best option here"  # cut at max_new_tokens
SHAPES = ("small", "recipe", "multi_turn")


def batch(n: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 0):
    """`n` (prompt, completion, advantage, allowed) rows of random token ids (the small shape;
    allowed None: free text)."""
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
                None,
            )
        )
    return rows


class RandomLegalBackend:
    """A backend that answers every turn with a uniformly random legal move, in brackets, then
    `FILLER`, cut at `max_new_tokens` (constrained decoding: the move alone, then end of
    sequence); its prompt ids are the chat template of the conversation."""

    name = "random-legal"

    def __init__(self, tokenizer, seed: int = 0):
        self.tokenizer, self.rng = tokenizer, np.random.default_rng(seed)

    def generate(self, conversations, params, allowed=None):
        from agents.backend import Generation
        from training.sequences import render_prompt

        out = []
        for n, conv in enumerate(conversations):
            prompt = render_prompt(self.tokenizer, conv)
            if allowed is not None and allowed[n] is not None:
                move = allowed[n][int(self.rng.integers(len(allowed[n])))]
                ids = self.tokenizer(move, add_special_tokens=False)["input_ids"]
                ids.append(self.tokenizer.eos_token_id)
                out.append(Generation(move, ids, [], prompt, "stop"))
                continue
            listed = conv[-1]["content"].rsplit("LEGAL MOVES:", 1)[-1]
            moves = re.findall(r"\[([^\]]+)\]", listed)
            move = moves[int(self.rng.integers(len(moves)))]
            ids = self.tokenizer(f"[{move}]{FILLER}", add_special_tokens=False)["input_ids"]
            ids = ids[: params.max_new_tokens]
            out.append(Generation(self.tokenizer.decode(ids), ids, [], prompt, "length"))
        return out


def recipe_rows(
    mode: str = "fresh", seed: int = 0, matches: int | None = None, config: Path = RECIPE
):
    """(prompt ids, completion ids, advantage, game, allowed) of every policy turn of a training
    step's matches (`matches`, default the `config`'s `matches_per_step`, in pairs of seat
    orders spread evenly over its games), played by `RandomLegalBackend` with the config's
    agent in `mode` (its tokenizer's chat template); allowed: the legal moves of a turn
    decoded under legal-move constraints, else None."""
    from dataclasses import replace

    from agents.llm_agent import LLMAgent
    from agents.models import load_tokenizer
    from arena.runner import plan_matches, play
    from training.config import POLICY, load_config

    cfg = load_config(config)
    tok = load_tokenizer(cfg.model)
    agent = LLMAgent(
        POLICY, RandomLegalBackend(tok, seed), replace(cfg.agent, mode=mode, seed=seed)
    )
    rng = np.random.default_rng(seed)
    plans = []
    for j in range((matches or cfg.matches_per_step) // 2):
        g = cfg.games[j % len(cfg.games)]
        seed_j = int(rng.integers(2**31 - 1))
        plans += plan_matches(g.name, [POLICY], 2, seed=seed_j, params=g.params, prefix=f"p{j}m")
    rows = []
    for record in play(plans, {POLICY: agent}, concurrency=len(plans)):
        for t in record.turns:
            if t.agent == POLICY and t.token_ids:
                allowed = list(t.legal_moves) if t.constrained else None
                prompt, completion = list(t.prompt_token_ids), list(t.token_ids)
                rows.append((prompt, completion, float(rng.normal()), record.game, allowed))
    return rows


def recipe_learner(config: Path = RECIPE) -> tuple[float, int]:
    """The config's KL coefficient and micro-batch tokens."""
    from training.config import load_config

    cfg = load_config(config)
    return cfg.learner.loss.kl_coef, cfg.learner.micro_batch_tokens


PATHS = (
    "plain",
    "plain, autocast",
    "learner fp32",
    "learner bf16",
    "per sequence",
    "shared prefix",
    "learner bf16, sdpa",
    "learner bf16, stochastic",
)
PER_SEQUENCE, SHARED = "per sequence", "shared prefix"


def run_path(
    path: str,
    model_name: str,
    rows,
    warmup: int,
    steps: int,
    threads: int,
    kl_coef: float = 0.0,
    micro_batch_tokens: int = 8192,
) -> dict:
    """Time `steps` steps of `path` on `rows` (after `warmup`); then both matmul rates,
    measured in this process under the same load."""
    import contextlib

    import torch

    from agents.models import load_model
    from core.machine import matmul_flops, set_threads

    set_threads(threads, verbose=False)
    torch.manual_seed(0)
    model, tok = load_model(model_name, dtype="float32")
    model.train()
    tokens = sum(len(p) + len(c) for p, c, *_ in rows)
    spans, dtype = [(0, len(p) + len(c) - 1) for p, c, *_ in rows], "float32"
    if path.startswith("learner") or path in (PER_SEQUENCE, SHARED):
        from training.learner import Learner
        from training.learner_config import LearnerConfig
        from training.loss import LossConfig
        from training.sequences import TrainingSequence

        precision = "auto" if path in (PER_SEQUENCE, SHARED) else "float32"
        precision = "bfloat16" if "bf16" in path else precision
        learner = Learner(
            model,
            tok,
            LearnerConfig(
                lr=1e-5,
                loss=LossConfig(kl_coef=kl_coef),
                precision=precision,
                micro_batch_tokens=micro_batch_tokens,
                bf16_rounding="stochastic" if path.endswith("stochastic") else "nearest",
                shared_prefix=path == SHARED,
            ),
        )
        dtype = learner.compute_dtype
        if path.endswith("sdpa"):
            learner.attention = None  # the module's own (sdpa) attention
        seqs = [TrainingSequence(p, c, a, allowed=allowed) for p, c, a, allowed in rows]
        learner.step(
            [TrainingSequence(rows[0][0][:16], rows[0][1][:1], 1.0)]
        )  # optimizer state, kernels
        spans = learner.computed_spans(seqs)  # what the passes compute

        def step():
            learner.step(seqs)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        width = max(len(p) + len(c) for p, c, *_ in rows)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.full((len(rows), width), pad)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100)
        for i, (p, c, *_) in enumerate(rows):
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
        "computed_tokens": sum(n for _, n in spans) + len(rows),  # + each reply's last token
        "spans": spans,
        "bf16": float(dtype == "bfloat16" or path.endswith("autocast")),
    }
    out.update({f"matmul_{dt}": matmul_flops(dt, seconds=0.5) for dt in ("float32", "bfloat16")})
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument(
        "--shape",
        choices=SHAPES,
        default="small",
        help="small: 8 x ~160 random tokens, KL off; recipe: a train_mars_smollm2 step (its real "
        "prompts, KL 0.2); multi_turn: the same matches as growing conversations",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=RECIPE,
        help="recipe/multi_turn: the training config whose step is played (default: the MARS recipe)",
    )
    p.add_argument(
        "--matches",
        type=int,
        help="recipe/multi_turn: matches played (default: the recipe's matches_per_step)",
    )
    p.add_argument("--sequences", type=int, help="small shape: sequences a step (default 8)")
    p.add_argument("--prompt-len", type=int, default=150, help="small shape: mean prompt tokens")
    p.add_argument(
        "--completion-len", type=int, default=10, help="small shape: mean completion tokens"
    )
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        help="learner micro-batch (default: small 8192, recipe/multi_turn the recipe's 4096)",
    )
    p.add_argument(
        "--paths",
        help="';'-separated subset of: "
        + "; ".join(PATHS)
        + " (default: recipe/multi_turn per sequence;shared prefix, small the first four)",
    )
    p.add_argument(
        "--warmup", type=int, help="untimed steps on the batch first (default: small 1, else 0)"
    )
    p.add_argument("--steps", type=int, help="timed steps (default: small 3, else 1)")
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
    p.add_argument("--_rows", help=argparse.SUPPRESS)  # internal: the rows, as JSON
    args = p.parse_args(argv)
    small = args.shape == "small"
    kl, recipe_micro = (0.0, 8192) if small else recipe_learner(args.config)
    defaults = {
        "sequences": 8,
        "micro_batch_tokens": recipe_micro,
        "warmup": 1 if small else 0,
        "steps": 3 if small else 1,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.quick:
        args.sequences, args.prompt_len, args.warmup, args.steps = 4, 40, 1, 1
        args.matches = args.matches or 2
    paths = (
        [x.strip() for x in args.paths.split(";")]
        if args.paths
        else list(PATHS[:4] if small else (PER_SEQUENCE, SHARED))
    )
    if unknown := [x for x in paths if x not in PATHS]:
        raise SystemExit(f"unknown path {unknown[0]!r}; the paths are: {', '.join(PATHS)}")
    if args._path:
        rows = [tuple(r) for r in json.loads(Path(args._rows).read_text())]
        result = run_path(
            args._path,
            args.model,
            rows,
            args.warmup,
            args.steps,
            args.threads,
            kl,
            args.micro_batch_tokens,
        )
        print(json.dumps(result))
        return {}

    import statistics

    from machine_limit import model_config

    from core.machine import flops_per_token, set_threads

    threads = set_threads(args.threads)  # chosen once here, so every path runs on the same count
    if small:
        rows = batch(args.sequences, args.prompt_len, args.completion_len, vocab=49152)
        games_in = ""
    else:
        mode = "fresh" if args.shape == "recipe" else "multi_turn"
        played = recipe_rows(mode, 0, args.matches, args.config)
        rows = [(p_, c, a, allowed) for p_, c, a, _, allowed in played]
        count = {g: sum(r[3] == g for r in played) for g in dict.fromkeys(r[3] for r in played)}
        games_in = ", ".join(f"{g} {n}" for g, n in count.items())
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    runs: dict[str, list[dict]] = {path: [] for path in paths}
    loads = [os.getloadavg()[0]]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(rows, f)
    try:
        for r in range(args.repeats):
            for path in paths[r % len(paths) :] + paths[: r % len(paths)]:
                cmd = [sys.executable, __file__, *passed, "--threads", str(threads)]
                cmd += ["--_path", path, "--_rows", f.name]
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{path} path failed: {out.stderr.strip().splitlines()[-1]}")
                runs[path].append(json.loads(out.stdout.strip().splitlines()[-1]))
                loads.append(os.getloadavg()[0])
    finally:
        os.unlink(f.name)
    results = {
        path: {key: statistics.median(x[key] for x in rs) for key in rs[0] if key != "spans"}
        for path, rs in runs.items()
    }
    matmul = {
        dt: statistics.median(x[f"matmul_{dt}"] for rs in runs.values() for x in rs)
        for dt in ("float32", "bfloat16")
    }

    prompt, completion = sum(len(p) for p, *_ in rows), sum(len(c) for _, c, *_ in rows)
    config = model_config(args.model)
    passes = 3 + (kl > 0)  # forward + backward (2 forwards' worth), and the reference's forward
    body = flops_per_token(config, 0, head=False)
    per_key = flops_per_token(config, 1, head=False) - body  # attention to one more token
    head = flops_per_token(config, 0) - body

    def forward_flops(spans) -> float:
        """The forward FLOPs of computing `spans` (each token attends to every one before it
        and itself), and the LM head at every completion position."""
        keys = sum(n * start + n * (n + 1) / 2 for start, n in spans)
        return sum(n for _, n in spans) * body + keys * per_key + completion * head

    everything = forward_flops([(0, len(p) + len(c) - 1) for p, c, *_ in rows])
    needed = {path: forward_flops(runs[path][0]["spans"]) for path in paths}

    def mfu(path: str, computed: bool = False) -> float:
        rate = matmul["bfloat16" if results[path]["bf16"] else "float32"]
        flops = needed[path] if computed else everything
        return passes * flops / results[path]["seconds_per_step"] / rate

    from rich.console import Console
    from rich.table import Table

    lengths = [len(p) for p, *_ in rows]
    what = (
        f"~{args.prompt_len + args.completion_len} tokens"
        if small
        else f"a {Path(args.config).stem} step, mode {'fresh' if args.shape == 'recipe' else 'multi_turn'} "
        f"({games_in}; prompts {min(lengths)}-{max(lengths)} tokens, mean {np.mean(lengths):.0f}; "
        f"KL {kl}, micro-batches of {args.micro_batch_tokens} tokens)"
    )
    table = Table(
        title=f"{args.model}: {len(rows)} sequences, {prompt + completion} tokens, {what}, "
        f"{args.steps} timed steps, {threads} threads, load {min(loads):.1f}-{max(loads):.1f}"
        + (f", median of {args.repeats} interleaved runs" if args.repeats > 1 else "")
    )
    columns = ("path", "dtype", "tokens/s", "s/step", "CPU s/step", "computed tokens", "MFU")
    columns += ("MFU computed", "peak RSS MiB", "each run s/step (CPU)")
    for col in columns:
        table.add_column(col, justify="right" if col != "path" else "left")
    for path, r in results.items():
        table.add_row(
            path,
            "bf16" if r["bf16"] else "fp32",
            f"{r['tokens_per_s']:.0f}",
            f"{r['seconds_per_step']:.2f}",
            f"{r['cpu_per_step']:.2f}",
            f"{r['computed_tokens']:.0f}",
            f"{mfu(path):.1%}",
            f"{mfu(path, computed=True):.1%}",
            f"{r['peak_rss_mib']:.0f}",
            " ".join(f"{x['seconds_per_step']:.1f} ({x['cpu_per_step']:.1f})" for x in runs[path]),
        )
    console = Console(width=200)
    console.print(table)
    f32, b16 = matmul["float32"], matmul["bfloat16"]
    console.print(
        f"matmul (2048^2, median over the path processes): fp32 {f32 / 1e9:.0f} / bf16 {b16 / 1e9:.0f} GFLOP/s = "
        f"{b16 / f32:.2f}x; MFU: {passes}x the forward FLOPs per second over the path dtype's rate"
    )
    out = {
        "mfu": {path: mfu(path) for path in paths},
        "mfu_computed": {path: mfu(path, computed=True) for path in paths},
        "matmul_ratio": b16 / f32,
        "sequences": len(rows),
        "tokens": prompt + completion,
        **results,
    }
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
        for other in ("learner bf16, stochastic", "learner bf16, sdpa"):
            if other in rate:
                console.print(
                    f"{other} / learner bf16 = {rate[other] / rate['learner bf16']:.2f}x wall, "
                    f"{b['cpu_per_step'] / results[other]['cpu_per_step']:.2f}x per CPU second"
                )
    if {PER_SEQUENCE, SHARED} <= rate.keys():
        per, shared = results[PER_SEQUENCE], results[SHARED]
        out["shared_ratio"] = wall = per["seconds_per_step"] / shared["seconds_per_step"]
        out["shared_cpu_ratio"] = cpu = per["cpu_per_step"] / shared["cpu_per_step"]
        targets = {"recipe": 2.5, "multi_turn": 4.0}  # on the MARS recipe's step
        target = targets.get(args.shape) if Path(args.config) == RECIPE else None
        verdict = (
            f" (target >= {target}x: {'met' if min(wall, cpu) >= target else 'MISSED'})"
            if target
            else ""
        )
        console.print(
            f"per CPU second {cpu:.2f}x{verdict}; tokens computed {per['computed_tokens']:.0f} -> "
            f"{shared['computed_tokens']:.0f} ({per['computed_tokens'] / shared['computed_tokens']:.2f}x "
            f"fewer), FLOPs {needed[PER_SEQUENCE] / needed[SHARED]:.2f}x fewer (attention included); "
            f"peak RSS {per['peak_rss_mib']:.0f} -> {shared['peak_rss_mib']:.0f} MiB"
        )
        out["shared_flops_ratio"] = needed[PER_SEQUENCE] / needed[SHARED]
        console.print(f"shared prefix / per sequence: {wall:.2f}x")
    return out


if __name__ == "__main__":
    main()
