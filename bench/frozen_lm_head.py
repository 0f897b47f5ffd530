"""One `TransformersBackend.generate` call of a LoRA policy with its LM head frozen (as LoRA
training leaves it) vs trainable, and two prefill forwards with the head frozen: keeping
the last position as an int (`logits_to_keep=1`) vs as an index tensor (what the backend runs).

    python bench/frozen_lm_head.py                      # tiny-llama and SmolLM2-135M, fp32 and bf16
    python bench/frozen_lm_head.py --models tiny-llama --rows 32

Target: generate with a frozen head / trainable head ~1.0x (same kernels, same outputs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from agents.backend import SamplingParams
from agents.models import load_model
from agents.transformers_backend import LAST_TOKEN, TransformersBackend
from core.machine import set_threads


def seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", nargs="+", default=["tiny-llama", "smollm2-135m"])
    p.add_argument(
        "--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"]
    )
    p.add_argument("--rows", type=int, default=16, help="conversations in the batch")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument(
        "--repeats", type=int, default=3, help="median of this many timed calls per path"
    )
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    set_threads(args.threads)
    from peft import LoraConfig, get_peft_model

    convs = [
        [{"role": "user", "content": f"Tic-tac-toe, match {i}. Cells 0-8, all empty. Your move?"}]
        for i in range(args.rows)
    ]
    params = SamplingParams(
        max_new_tokens=args.max_new_tokens, temperature=1.0, seeds=list(range(args.rows))
    )
    for name in args.models:
        for dtype in args.dtypes:
            model, tok = load_model(name, dtype=dtype, device="cpu")
            model = get_peft_model(
                model, LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM")
            )
            backend = TransformersBackend((model, tok))
            head = model.get_output_embeddings().weight
            ids = torch.tensor([backend.encode(c)[:40] for c in convs])

            def prefill(keep):
                with torch.inference_mode():
                    model(input_ids=ids, use_cache=True, logits_to_keep=keep)

            time_of = {}
            for frozen in (False, True):
                head.requires_grad_(not frozen)
                time_of["generate", frozen] = seconds(
                    lambda: backend.generate(convs, params), args.repeats
                )
                time_of["int", frozen] = seconds(lambda: prefill(1), args.repeats)
                time_of["index", frozen] = seconds(lambda: prefill(LAST_TOKEN), args.repeats)
            print(
                f"{name} {dtype}, {args.rows} rows, {args.max_new_tokens} new tokens, {torch.get_num_threads()} threads, "
                f"load {os.getloadavg()[0]:.1f}: generate frozen head {time_of['generate', True]:.3f} s / trainable "
                f"{time_of['generate', False]:.3f} s = {time_of['generate', True] / time_of['generate', False]:.2f}x; "
                f"prefill (frozen head) logits_to_keep=1 {time_of['int', True]:.3f} s vs index {time_of['index', True]:.3f} s "
                f"= {time_of['int', True] / time_of['index', True]:.1f}x (trainable head: {time_of['int', False]:.3f} vs "
                f"{time_of['index', False]:.3f} s)"
            )


if __name__ == "__main__":
    main()
