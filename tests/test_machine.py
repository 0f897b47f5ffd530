"""Thread choice and the compute-ceiling arithmetic (arena/machine.py)."""

import os

import pytest
import torch

from arena.machine import choose_threads, flops_per_token, matmul_flops, set_threads, usable_cpus


@pytest.mark.parametrize("cpus,load,expected", [
    (2, 0.0, 2),   # idle box: every CPU
    (2, 0.4, 2),   # a little background noise does not cost a thread
    (2, 0.6, 1),   # one CPU busy elsewhere: leave it (2 threads ran 4-5x slower)
    (2, 5.0, 1),   # overloaded: still one thread
    (8, 3.2, 5),
    (1, 0.0, 1),
])
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
        assert "as configured" in capsys.readouterr().out
        monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 0.0, 0.0))
        assert set_threads(None) == 1
        out = capsys.readouterr().out
        assert "torch threads: 1" in out and "load 50.0" in out
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert set_threads(0, verbose=False) == usable_cpus()
        with pytest.raises(ValueError, match="threads must be >= 1"):
            set_threads(-2)
    finally:
        torch.set_num_threads(before)


def test_flops_per_token_counts_llama_matmuls():
    from transformers import LlamaConfig

    c = LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, vocab_size=10)
    # per layer: q,o 8x8 each; k,v 8x4 each; mlp 3 x 8x16 -> 128 + 64 + 384 = 576 multiply-adds
    assert flops_per_token(c, context=0) == 2 * (2 * 576) + 2 * 8 * 10
    # attention: 4 FLOPs per context token per query dimension per layer
    assert flops_per_token(c, context=5) - flops_per_token(c, context=0) == 2 * 4 * 5 * 8


def test_matmul_flops_is_positive_and_bounded_in_time():
    import time

    start = time.perf_counter()
    assert matmul_flops("float32", size=256, seconds=0.05) > 1e8
    assert matmul_flops("bfloat16", size=2048, seconds=0.2) > 0  # shrinks where bf16 is emulated
    assert time.perf_counter() - start < 10
