"""What this machine can do: usable CPUs, the torch thread count to run with, and the
compute ceiling (matmul FLOP/s, a model's FLOPs per token) that benchmarks compare to.

    from core.machine import set_threads
    set_threads(None)   # auto: prints "torch threads: 1 (2 CPUs usable, load 1.4)"

Threads are chosen by load because OpenMP workers spin-wait for a core another process holds:
more threads than free cores run slower than one (docs/results/benchmarks.md#machine-notes).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from pathlib import Path


def usable_cpus(cgroup_root: str | Path = "/sys/fs/cgroup") -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path(cgroup_root, "cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def choose_threads(cpus: int, load: float) -> int:
    """Threads for torch given the usable CPUs and the 1-minute load average of others.

    Every CPU that other work keeps busy (load rounded to the nearest whole CPU) is left
    to it; at least one thread.
    """
    return max(1, min(cpus, cpus - round(load)))


_announcement: list[str] = []  # the last choice's line, until a model load prints it


def set_threads(requested: int | None, verbose: bool = True) -> int:
    """Set torch's intra-op threads: `requested` if given (> 0), else chosen from the load.

    Returns the count set. Prints it with the reason to stderr, or with `verbose` false
    keeps the line for `announce_threads` (printed when a model loads: bots need no torch).
    """
    import torch  # start-up time: torch

    if requested is not None and requested < 0:
        raise ValueError(f"threads must be >= 1 (or 0/None for automatic), got {requested}")
    cpus = usable_cpus()
    if requested:
        threads, why = requested, "as configured"
    else:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        threads, why = choose_threads(cpus, load), f"automatic: {cpus} CPUs usable, load {load:.1f}"
    torch.set_num_threads(threads)
    _announcement[:] = [
        f"torch threads: {threads} ({why}; override with --threads N or threads: N)"
    ]
    if verbose:
        announce_threads()
    return threads


def announce_threads(printer=None) -> None:
    """Print the pending thread-choice line once (to stderr, or through `printer`)."""
    if _announcement:
        line = _announcement.pop()
        printer(line) if printer else print(line, file=sys.stderr)


def matmul_flops(
    dtype: str = "float32", size: int = 2048, seconds: float = 1.0, device: str = "cpu"
) -> float:
    """Measured FLOP/s of a square matmul in `dtype` at torch's current thread count (on a
    CUDA `device`: the card's, each product waited for; fp32 as torch runs it, without TF32
    unless `torch.backends.cuda.matmul.allow_tf32` is set).

    A CPU without native bf16 (no AVX-512 BF16 / AMX) runs bf16 matmuls hundreds of times
    slower than fp32; a 256 probe first shrinks `size` so one product takes a fraction of
    `seconds`, and the figure still comes back.
    """
    import torch  # start-up time: torch

    dt = getattr(torch, dtype)
    cuda = str(device).startswith("cuda")

    def rate(n: int, budget: float) -> float:
        gen = torch.Generator(device=device).manual_seed(0)  # leaves the global RNG as it was
        a = torch.randn(n, n, dtype=dt, device=device, generator=gen)
        b = torch.randn(n, n, dtype=dt, device=device, generator=gen)
        a @ b  # warm-up (kernel selection, page faults)
        if cuda:
            torch.cuda.synchronize()
        runs, start = 0, time.perf_counter()
        while True:
            a @ b
            if cuda:
                torch.cuda.synchronize()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= budget:
                return 2 * n**3 * runs / elapsed

    if cuda:  # no slow dtype to guard against; a small probe would measure launch latency
        return rate(size, seconds)
    probe = rate(256, 0.05)
    while size > 256 and 2 * size**3 / probe > seconds / 4:
        size //= 2
    return probe if size <= 256 else rate(size, seconds)


@functools.cache
def fastest_dtype(candidates: tuple[str, ...] = ("bfloat16", "float32"), rounds: int = 5) -> str:
    """The candidate dtype with the highest measured matmul rate on this CPU (~0.5 s).

    Each dtype's best of `rounds` short measurements, taken in turns: other work on the
    machine only ever slows a measurement down, and a single short one can pick the slower
    dtype under load (a run's numerics then hang on the load)."""
    best = dict.fromkeys(candidates, 0.0)
    for _ in range(rounds):
        for dt in candidates:
            best[dt] = max(
                best[dt], matmul_flops(dt, size=256, seconds=0.2 / (rounds * len(candidates)))
            )
    return max(candidates, key=best.get)


def weight_matmuls(config) -> list[tuple[int, int, int]]:
    """The weight matmuls a token passes through, as (in features, out features, count): every
    layer's attention projections (q, k, v, o; k and v narrower with grouped-query attention)
    and MLP (gate, up, down; Llama), then the LM head last."""
    d, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    ffn = config.intermediate_size
    return [
        (d, heads * head_dim, layers),
        (d, kv_heads * head_dim, 2 * layers),
        (heads * head_dim, d, layers),
        (d, ffn, 2 * layers),
        (ffn, d, layers),
        (d, config.vocab_size, 1),
    ]


def flops_per_token(config, context: int = 0, head: bool = True) -> float:
    """Forward FLOPs of one token of a decoder-only transformer (2 per multiply-add).

    The weight matmuls of every layer (`weight_matmuls`) and (with `head`) the LM head, plus
    attention over `context` earlier tokens (QK^T and the weighted sum of V, for every head).
    Training costs about 3x this (the backward pass is two matmuls per forward one).
    """
    *body, lm_head = weight_matmuls(config)
    query_width = body[0][1]  # heads * head_dim: the q projection's output
    attention = config.num_hidden_layers * 4 * context * query_width
    return (
        sum(2 * k * n * count for k, n, count in [*body, *([lm_head] if head else [])]) + attention
    )


def model_flops(config, prompt_tokens: int, completion_tokens: int, context: int) -> float:
    """Forward FLOPs a model needs to read `prompt_tokens` and produce logits for
    `completion_tokens` (prompt tokens skip the LM head: only the last one's logits are
    used, and that one is counted as the first completion position)."""
    return prompt_tokens * flops_per_token(
        config, context, head=False
    ) + completion_tokens * flops_per_token(config, context)


PRECISIONS = ("auto", "float32", "bfloat16")


def resolve_device(device: str) -> str:
    """A device name with "auto" resolved: "cuda" when torch sees a CUDA device, else "cpu".

    Args:
        device: "auto", "cpu", "cuda" or "cuda:N".

    Returns:
        The device name torch takes.
    """
    import torch  # start-up time: torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def compute_dtype(precision: str, device: str = "cpu") -> str:
    """The dtype models compute in: `precision` itself, or for "auto" bf16 on a GPU and on a
    CPU the faster of bf16 and fp32 by a ~0.5 s matmul measurement (a CPU without native
    bf16 runs it hundreds of times slower)."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"dtype/precision must be one of {', '.join(PRECISIONS)}, got {precision!r}"
        )
    if precision != "auto":
        return precision
    return "bfloat16" if str(device).startswith("cuda") else fastest_dtype()
