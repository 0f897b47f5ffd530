"""The machine's compute ceiling: matmul FLOP/s (fp32, bf16) and a model's tokens/s bound.

    python bench/machine_limit.py                      # SmolLM2-135M, torch threads chosen by load
    python bench/machine_limit.py --threads 2 --model tiny-llama

Prints, at the thread count in use:
- the FLOP/s of a square matmul (2048, smaller where a dtype is very slow) in fp32 and bf16, and their ratio;
- the model's forward FLOPs per token at the given context (`arena.machine.flops_per_token`);
- the ceilings: generated tokens/s if every FLOP were a useful matmul at that rate, and
  trained tokens/s (forward + backward = 3x the forward FLOPs).
Other benches print their throughput as a fraction of these (model FLOPs utilisation).
On a CPU without native bf16 (AVX-512 BF16 or AMX: check `lscpu` flags) bf16 comes out
hundreds of times slower than fp32; that is why `dtype: auto` measures before choosing.
Small-batch decoding is bound by memory bandwidth, not FLOPs, so a low fraction there
says how much a larger batch could still gain.
"""

from __future__ import annotations

import argparse

from arena.machine import flops_per_token, matmul_flops, set_threads


def model_config(name: str):
    """The model's transformers config, without loading the weights where possible."""
    from agents.models import SMOLLM2, TINY, load_model, smollm2_folder

    if name.lower().startswith(TINY):
        return load_model(name)[0].config
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(smollm2_folder()) if name.lower() == SMOLLM2 else name)


def ceilings(config, context: int, flops: dict[str, float]) -> dict[str, dict[str, float]]:
    """{dtype: {"generate": tokens/s, "train": tokens/s}} at the measured matmul rates."""
    fwd = flops_per_token(config, context)
    return {dt: {"generate": f / fwd, "train": f / (3 * fwd)} for dt, f in flops.items()}


def measure(model: str = "smollm2-135m", context: int = 256, seconds: float = 2.0) -> dict:
    """Matmul rates and the model's ceilings at torch's current thread count."""
    import torch

    flops = {dt: matmul_flops(dt, seconds=seconds) for dt in ("float32", "bfloat16")}
    config = model_config(model)
    return {"threads": torch.get_num_threads(), "flops": flops, "flops_per_token": flops_per_token(config, context),
            "context": context, "ceilings": ceilings(config, context, flops)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--context", type=int, default=256, help="tokens of context each new token attends to")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: chosen from the CPUs and the load)")
    p.add_argument("--seconds", type=float, default=2.0, help="time per matmul measurement")
    args = p.parse_args(argv)
    set_threads(args.threads)
    m = measure(args.model, args.context, args.seconds)
    f32, b16 = m["flops"]["float32"], m["flops"]["bfloat16"]
    print(f"matmul, {m['threads']} threads: fp32 {f32 / 1e9:.1f} GFLOP/s, bf16 {b16 / 1e9:.1f} GFLOP/s "
          f"(bf16/fp32 = {b16 / f32:.2f}x)")
    print(f"{args.model}: {m['flops_per_token'] / 1e6:.0f} MFLOPs a token forward at context {args.context}")
    for dt, c in m["ceilings"].items():
        print(f"ceiling {dt:>8}: generate {c['generate']:8.0f} tokens/s, train {c['train']:8.0f} tokens/s")
    return m


if __name__ == "__main__":
    main()
