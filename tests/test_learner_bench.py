"""bench/learner_throughput.py's recipe-shaped step on the real tiny Llama."""

import importlib.util
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent.parent / "bench" / "learner_throughput.py"


def load():
    spec = importlib.util.spec_from_file_location("learner_throughput", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_batch_keeps_the_recipes_mix_of_short_and_long_prompts():
    bench = load()
    rows = bench.recipe_batch(16, 12, vocab=49152)
    prompts = [len(p) for p, _, _ in rows]
    assert all(len(c) == 12 for _, c, _ in rows)
    assert min(bench.RECIPE_PROMPTS) <= min(prompts) and max(prompts) <= max(bench.RECIPE_PROMPTS)
    for short in (
        True,
        False,
    ):  # tic-tac-toe/Kuhn prompts vs hanabi_mini's, in the recipe's proportion (one may fall between)
        share = np.mean([(p < 400) == short and not 400 <= p <= 700 for p in prompts])
        recipe = np.mean([(p < 400) == short for p in bench.RECIPE_PROMPTS])
        assert abs(share - recipe) <= 1.5 / 16
    assert abs(np.mean(prompts) - np.mean(bench.RECIPE_PROMPTS)) < 30


def test_recipe_shape_times_the_learner_paths_and_scales_to_a_whole_step():
    out = load().main(
        [
            "--model",
            "tiny-llama",
            "--shape",
            "recipe",
            "--sequences",
            "4",
            "--steps",
            "1",
            "--threads",
            "1",
            "--paths",
            "learner fp32;learner bf16;learner bf16, sdpa",
        ]
    )
    for path in ("learner fp32", "learner bf16", "learner bf16, sdpa"):
        r = out[path]
        assert (
            r["seconds_per_step"] > r["fixed_per_step"] > 0
            and r["cpu_per_step"] > 0
            and out["mfu"][path] > 0
        )
    assert out["bf16_ratio"] > 0 and out["bf16_cpu_ratio"] > 0 and out["matmul_ratio"] > 0
    # the whole step: 61 sequences' worth of the per-token part plus the fixed part once
    assert out["full_step"]["learner fp32"] > 61 / 4 * 0.5 * (
        out["learner fp32"]["cpu_per_step"] - out["learner fp32"]["fixed_cpu_per_step"]
    )
