"""The machine's compute ceiling: matmul FLOP/s (fp32, bf16) and a model's tokens/s bound.

    python bench/machine_limit.py                      # SmolLM2-135M, torch threads chosen by load
    python bench/machine_limit.py --threads 2 --model tiny-llama

Prints, at the thread count in use:
- the FLOP/s of a square matmul (2048, smaller where a dtype is very slow) in fp32 and bf16, and their ratio;
- the model's forward FLOPs per token at the given context (`core.machine.flops_per_token`);
- the ceilings: generated tokens/s if every FLOP were a useful matmul at that rate, and
  trained tokens/s (forward + backward = 3x the forward FLOPs).
Other benches print their throughput as model FLOPs utilisation (`utilisation`: the FLOPs
the model needed, `core.machine.model_flops`, per second over the matmul FLOP/s).
It prints the CPU's model and its matrix flags first: without native bf16 (AVX-512 BF16 or
AMX) bf16 comes out hundreds of times slower than fp32; that is why `dtype: auto` measures
before choosing.
Small-batch decoding is bound by memory bandwidth, not FLOPs, so a low fraction there
says how much a larger batch could still gain. `--rows` times the model's own weight
matmuls at a decoding batch's shape in both dtypes (`decode_flops`), bf16 also on weights
prepacked for oneDNN as the transformers backend decodes (`agents.packed_linear`): their
ratio, not the square matmul's, is the most bf16 can gain over fp32 decoding a batch of that size.
"""

from __future__ import annotations

import argparse

from core.machine import flops_per_token, matmul_flops, model_flops, set_threads, weight_matmuls


def model_config(name: str):
    """The model's transformers config, without loading the weights where possible."""
    from agents.models import SMOLLM2, TINY, load_model, smollm2_folder

    if name.lower().startswith(TINY):
        return load_model(name)[0].config
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(smollm2_folder()) if name.lower() == SMOLLM2 else name)


def cpu_flags() -> tuple[str, list[str]]:
    """(CPU model name, its vector/matrix flags that decide fp32/bf16 speed) from /proc/cpuinfo."""
    import re

    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown CPU", []
    name = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    wanted = [
        f for f in (flags.group(1).split() if flags else []) if f.startswith(("avx", "amx", "fma"))
    ]
    return (name.group(1).strip() if name else "unknown CPU"), wanted


def run_facts() -> dict:
    """What a bench's JSON says of its run: the hardware (CPU model, vector flags, cores, torch),
    threads, load average, date and the command line."""
    import os
    import sys
    import time

    import torch

    cpu, flags = cpu_flags()
    return {
        "hardware": f"{cpu}, {os.cpu_count()} CPUs, flags {' '.join(flags)}, torch {torch.__version__}",
        "threads": torch.get_num_threads(),
        "load": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d"),
        "command": "python " + " ".join(sys.argv),
    }


def ceilings(config, context: int, flops: dict[str, float]) -> dict[str, dict[str, float]]:
    """{dtype: {"generate": tokens/s, "train": tokens/s}} at the measured matmul rates."""
    fwd = flops_per_token(config, context)
    return {dt: {"generate": f / fwd, "train": f / (3 * fwd)} for dt, f in flops.items()}


def utilisation(
    config,
    prompt_tokens: int,
    completion_tokens: int,
    seconds: float,
    context: int,
    flops: float,
    passes: int = 1,
) -> float:
    """Model FLOPs utilisation: the FLOPs the model needed (`core.machine.model_flops`,
    times `passes`: 3 for a training step) per second, over the machine's matmul FLOP/s."""
    return passes * model_flops(config, prompt_tokens, completion_tokens, context) / seconds / flops


def decode_flops(
    config, rows: int, dtype: str, seconds: float = 1.0, packed: bool = False
) -> float:
    """FLOP/s of the model's own weight matmuls (`core.machine.weight_matmuls`) at `rows` rows: what a decoding
    step of a batch of `rows` sequences can reach in `dtype`. Small batches sit far below the
    square-matmul rate (at 1 row plain bf16 is slower than fp32 on AVX-512 BF16), so this, not the
    square figure, bounds the arena's bf16 / fp32 ratio at its batch size. `packed`: bf16 weights
    prepacked for oneDNN, as the transformers backend decodes (`agents.packed_linear`); plain
    otherwise (and for fp32, which prepacking does not speed up)."""
    import time

    import torch

    from agents.packed_linear import ROWS_HINT

    dt = getattr(torch, dtype)
    packed = packed and dt == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    total_flops = total_time = 0.0
    shapes = weight_matmuls(config)
    for k, n, count in shapes:
        x, w = torch.randn(rows, k, dtype=dt), torch.randn(n, k, dtype=dt)
        if packed:
            wp = torch.ops.mkldnn._reorder_linear_weight(w, ROWS_HINT)
            matmul = lambda: torch.ops.mkldnn._linear_pointwise(x, wp, None, "none", [], "")  # noqa: E731
        else:
            matmul = lambda: torch.nn.functional.linear(x, w)  # noqa: E731
        matmul()  # warm-up
        runs, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / len(shapes):
            matmul()
            runs += 1
        total_flops += 2 * rows * k * n * count
        total_time += elapsed / runs * count
    return total_flops / total_time


def measure(model: str = "smollm2-135m", context: int = 256, seconds: float = 2.0) -> dict:
    """Matmul rates and the model's ceilings at torch's current thread count."""
    import torch

    flops = {dt: matmul_flops(dt, seconds=seconds) for dt in ("float32", "bfloat16")}
    config = model_config(model)
    return {
        "threads": torch.get_num_threads(),
        "flops": flops,
        "flops_per_token": flops_per_token(config, context),
        "context": context,
        "ceilings": ceilings(config, context, flops),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument(
        "--context", type=int, default=256, help="tokens of context each new token attends to"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: chosen from the CPUs and the load)",
    )
    p.add_argument("--seconds", type=float, default=2.0, help="time per matmul measurement")
    p.add_argument(
        "--rows",
        type=int,
        nargs="*",
        default=[1, 16, 64],
        help="batch sizes at which to time the model's own decode matmuls (fp32 and bf16)",
    )
    args = p.parse_args(argv)
    set_threads(args.threads)
    name, flags = cpu_flags()
    print(
        f"{name}: {' '.join(flags) or 'no AVX flags'}"
        f" ({'native bf16' if {'avx512_bf16', 'amx_bf16'} & set(flags) else 'NO native bf16: bf16 is emulated'})"
    )
    m = measure(args.model, args.context, args.seconds)
    f32, b16 = m["flops"]["float32"], m["flops"]["bfloat16"]
    print(
        f"matmul, {m['threads']} threads: fp32 {f32 / 1e9:.1f} GFLOP/s, bf16 {b16 / 1e9:.1f} GFLOP/s "
        f"(bf16/fp32 = {b16 / f32:.2f}x)"
    )
    print(
        f"{args.model}: {m['flops_per_token'] / 1e6:.0f} MFLOPs a token forward at context {args.context}"
    )
    for dt, c in m["ceilings"].items():
        print(
            f"ceiling {dt:>8}: generate {c['generate']:8.0f} tokens/s, train {c['train']:8.0f} tokens/s"
        )
    config = model_config(args.model)
    m["decode"] = {}
    for rows in args.rows:
        f, b = (decode_flops(config, rows, dt, args.seconds / 2) for dt in ("float32", "bfloat16"))
        bp = decode_flops(config, rows, "bfloat16", args.seconds / 2, packed=True)
        m["decode"][rows] = {"float32": f, "bfloat16": b, "bfloat16 packed": bp}
        print(
            f"decode matmuls at {rows:>3} rows: fp32 {f / 1e9:6.1f}, bf16 {b / 1e9:6.1f}, bf16 prepacked {bp / 1e9:6.1f} GFLOP/s "
            f"(bf16/fp32 = {b / f:.2f}x plain, {bp / f:.2f}x prepacked as the backend decodes: "
            f"the most bf16 can gain decoding a batch of {rows})"
        )
    return m


if __name__ == "__main__":
    main()
