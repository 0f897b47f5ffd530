"""The benches run end to end in their --quick form (figures come from full runs, not here)."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env_throughput_quick_measures_both_games(monkeypatch, capsys):
    bench = load("env_throughput")
    ratios = bench.main(["--quick"])
    assert {"tic_tac_toe", "connect_four"} <= set(ratios) and all(r > 0 for r in ratios.values())
    if bench.has_textarena():  # the text layer against TextArena's, per wall and CPU second
        assert {"tic_tac_toe text", "tic_tac_toe text, per CPU s"} <= set(ratios)
    monkeypatch.setattr(bench, "has_textarena", lambda: False)
    assert set(bench.main(["--quick"])) == {"tic_tac_toe", "connect_four"}
    assert "skipped, textarena is not installed" in capsys.readouterr().out


@pytest.mark.slow
def test_rollout_throughput_quick_replays_the_arena_batches_in_both_dtypes():
    out = load("rollout_throughput").main(
        ["--quick", "--model", "tiny-llama", "--repeats", "2", "--threads", "1"]
    )
    tokens = out["tokens"]
    assert all(len(runs) == 2 for runs in tokens.values())
    for dt in ("float32", "bfloat16"):
        assert out[dt]["vs_raw"] > 0 and out[dt]["vs_serial"] > 0 and 0 <= out[dt]["legal"] <= 1
        assert (
            tokens[f"{dt} raw batched"] == tokens[f"{dt} arena"]
        )  # the replay generates exactly the arena's tokens
        assert len(set(tokens[f"{dt} arena"])) == 1  # seeded: every repeat plays the same matches
    assert (
        out["bf16_vs_fp32"] > 0
        and out["bf16_vs_fp32_ceiling"] > 0
        and all(f > 0 for f in out["mfu"].values())
    )
    assert all(out[dt]["matmuls_rows_vs_1"] > 0 for dt in ("float32", "bfloat16"))


@pytest.mark.slow
def test_learner_throughput_quick_runs_every_path_in_subprocesses():
    out = load("learner_throughput").main(["--quick", "--model", "tiny-llama", "--threads", "1"])
    assert out["ratio"] > 0 and out["bf16_ratio"] > 0
    assert all(
        out[path]["peak_rss_mib"] > 0 and out["mfu"][path] > 0
        for path in ("plain", "plain, autocast", "learner fp32", "learner bf16")
    )


@pytest.mark.ray
@pytest.mark.slow
def test_ray_training_step_quick_trains_both_paths_and_measures_the_sync():
    pytest.importorskip("ray")
    out = load("ray_training_step").main(["--quick", "--threads", "1"])
    assert out["ratio"] > 0 and out["step_ratio"] > 0
    (full, lora) = [row for row in out["sync"] if row[0] == "tiny-llama"]
    assert full[2] > 10 * lora[2] > 0  # LoRA publishes its adapters only


def test_export_throughput_quick_times_every_export_against_the_read(tmp_path):
    out = load("export_throughput").main(["--quick", "--json", str(tmp_path / "f.json")])
    assert out["matches"] == 200 and out["agent_turns"] > 200
    assert set(out["results"]) >= {
        "read the JSONL",
        "parquet, a row per turn",
        "parquet, a row per match",
        "openspiel trajectories (replays every match)",
    }
    assert all(r["seconds"] > 0 and r["vs_read"] > 0 for r in out["results"].values())
    assert (tmp_path / "f.json").is_file()


def test_prompt_cache_quick_plays_the_same_step_with_each_distinct_prompt_prefilled_once(tmp_path):
    quick = ["--set", "model=tiny-llama", "--set", "learner.lora_rank=0"]
    quick += ["--set", "matches_per_step=4", "--set", "concurrency=4", "--threads", "1"]
    out = load("prompt_cache").main([*quick, "--out", str(tmp_path / "cache.json")])
    assert out["policy_moves"] == 80  # 4 matches, 10 rounds, both seats the policy
    assert out["prompts_prefilled_plain"] == 80 and out["prompts_prefilled_cached"] <= 5
    assert out["moves_agree"] >= 0.95 and out["speedup"] > 0
    assert (tmp_path / "cache.json").exists()


def test_vllm_training_step_compares_the_shared_prefix_learner_with_one_row_per_sequence():
    """The whole-step bench's paths: transformers rollouts with one learner row per sequence
    against vLLM rollouts with the shared-prefix learner; `--same-learner` keeps the config's."""
    import argparse

    from training.config import load_config

    bench = load("vllm_training_step")
    config = str(BENCH.parent / "configs" / "train_mars_smollm2.yaml")
    args = dict(vllm_memory=0.2, vllm_dtype="", warmup=1, steps=2, threads=1, seed=0, matches=12)
    for same, expected in ((False, {"transformers": False, "vllm": True}), (True, None)):
        ns = argparse.Namespace(**args, same_learner=same)
        for path in ("transformers", "vllm"):
            cfg = load_config(config, bench.overrides(ns, path, "unused"))
            assert cfg.backend == path
            wanted = expected[path] if expected else load_config(config).learner.shared_prefix
            assert cfg.learner.shared_prefix == wanted


def test_prefix_cache_quick_plays_the_same_greedy_matches_prefilling_fewer_tokens(tmp_path):
    quick = ["--game", "trust_and_split", "--params", "{rounds: 2}", "--model", "tiny"]
    quick += ["--matches", "2", "--max-new-tokens", "4", "--temperature", "0", "--threads", "1"]
    out = load("prefix_cache").main([*quick, "--out", str(tmp_path / "prefix.json")])
    assert out["off"]["llm_turns"] == out["on"]["llm_turns"] == 16  # 2 matches, 2 rounds, 4 turns
    assert out["completions_agree"] == 1.0
    assert out["off"]["prompt_tokens_per_turn"] == out["on"]["prompt_tokens_per_turn"]
    assert out["on"]["prefill_tokens_per_turn"] < out["off"]["prefill_tokens_per_turn"] / 2
    assert (tmp_path / "prefix.json").exists()
