"""Thread choice and the compute-ceiling arithmetic (core/machine.py)."""

import os

import pytest
import torch

from core.machine import (
    choose_threads,
    compute_dtype,
    flops_per_token,
    matmul_flops,
    set_threads,
    usable_cpus,
    weight_matmuls,
)


@pytest.mark.parametrize(
    "cpus,load,expected",
    [
        (2, 0.0, 2),  # idle machine: every CPU
        (2, 0.4, 2),  # a little background noise does not cost a thread
        (2, 0.6, 1),  # one CPU busy elsewhere: leave it (2 threads ran 4-5x slower)
        (2, 5.0, 1),  # overloaded: still one thread
        (8, 3.2, 5),
        (1, 0.0, 1),
    ],
)
def test_choose_threads_leaves_busy_cpus(cpus, load, expected):
    assert choose_threads(cpus, load) == expected


def test_usable_cpus_reads_the_cgroup_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # one CPU's worth of quota
    assert usable_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path) == affinity
    assert usable_cpus(tmp_path / "missing") == affinity


def test_set_threads_configured_and_automatic(capsys, monkeypatch):
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 and torch.get_num_threads() == 1
        assert "as configured" in capsys.readouterr().err
        monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 0.0, 0.0))
        assert set_threads(None) == 1
        out = capsys.readouterr().err
        assert "torch threads: 1" in out and "load 50.0" in out
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert set_threads(0, verbose=False) == usable_cpus()
        with pytest.raises(ValueError, match="threads must be >= 1"):
            set_threads(-2)
    finally:
        torch.set_num_threads(before)


def test_flops_per_token_counts_llama_matmuls():
    from transformers import LlamaConfig

    c = LlamaConfig(
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=10,
    )
    # per layer: q,o 8x8 each; k,v 8x4 each; mlp 3 x 8x16 -> 128 + 64 + 384 = 576 multiply-adds
    assert flops_per_token(c, context=0) == 2 * (2 * 576) + 2 * 8 * 10
    # attention: 4 FLOPs per context token per query dimension per layer
    assert flops_per_token(c, context=5) - flops_per_token(c, context=0) == 2 * 4 * 5 * 8


def test_model_flops_skips_the_lm_head_on_prompt_tokens():
    from transformers import LlamaConfig

    from core.machine import model_flops

    c = LlamaConfig(
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=10,
    )
    head = 2 * 8 * 10
    assert flops_per_token(c, 5) - flops_per_token(c, 5, head=False) == head
    assert (
        model_flops(c, prompt_tokens=7, completion_tokens=3, context=5)
        == 10 * flops_per_token(c, 5) - 7 * head
    )


def test_auto_dtype_is_bf16_exactly_where_the_cpu_multiplies_bf16_natively():
    """`auto` measures; a CPU with AVX-512 BF16 or AMX must come out bf16 (~2.3x fp32 here),
    one without must come out fp32 (emulated bf16 is hundreds of times slower)."""
    _, flags = load_machine_limit().cpu_flags()
    native = bool({"avx512_bf16", "amx_bf16"} & set(flags))
    assert compute_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    assert (
        compute_dtype("float32", "cpu") == "float32" and compute_dtype("auto", "cuda") == "bfloat16"
    )
    with pytest.raises(ValueError, match="must be one of auto, float32, bfloat16"):
        compute_dtype("bf16", "cpu")


def load_machine_limit():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "machine_limit", Path(__file__).resolve().parents[2] / "bench" / "machine_limit.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_weight_matmuls_are_the_models_linear_layers():
    """The shapes `decode_flops` times (and `flops_per_token` counts) hold exactly the weights of the model's
    linear layers (grouped-query attention and a tied LM head included), so its FLOP/s is the model's own decode mix."""
    from agents.models import tiny_llama

    machine_limit = load_machine_limit()
    model = tiny_llama(0, hidden=64, layers=3, heads=4)[0]
    model.config.num_key_value_heads = 2  # grouped-query: k and v narrower than q
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(model.config)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(k * n * count for k, n, count in weight_matmuls(model.config)) == linear
    assert machine_limit.decode_flops(model.config, rows=4, dtype="float32", seconds=0.05) > 1e7


def test_matmul_flops_is_positive_and_bounded_in_time():
    import time

    start = time.perf_counter()
    assert matmul_flops("float32", size=256, seconds=0.05) > 1e8
    assert matmul_flops("bfloat16", size=2048, seconds=0.2) > 0  # shrinks where bf16 is emulated
    assert time.perf_counter() - start < 10


def test_cli_prints_and_applies_the_thread_choice(capsys):
    from cli.main import main

    before = torch.get_num_threads()
    try:
        assert (
            main(
                [
                    "play",
                    "tic_tac_toe",
                    "--agents",
                    "random",
                    "random",
                    "--matches",
                    "2",
                    "--threads",
                    "1",
                ]
            )
            == 0
        )
        assert torch.get_num_threads() == 1
        assert "torch threads" not in capsys.readouterr().err  # bots: no model, no line
        assert (
            main(
                [
                    "play",
                    "tic_tac_toe",
                    "--agents",
                    "llm:tiny-llama",
                    "random",
                    "--matches",
                    "1",
                    "--threads",
                    "1",
                ]
            )
            == 0
        )
        assert capsys.readouterr().err.count("torch threads: 1 (as configured") == 1
        assert (
            main(
                [
                    "play",
                    "tic_tac_toe",
                    "--agents",
                    "random",
                    "random",
                    "--matches",
                    "2",
                    "--threads",
                    "-1",
                ]
            )
            == 2
        )
        assert "threads must be >= 1" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)


def test_timing_a_matmul_leaves_the_global_rng_alone():
    """`precision: auto` times bf16 against fp32 while a run is being built: the timing must not
    move torch's global RNG, or a seeded model built after it would start from other weights."""
    import torch

    from core.machine import matmul_flops

    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    matmul_flops("float32", size=64, seconds=0.01)
    assert torch.equal(torch.rand(4), expected)
