"""The benches run end to end in their --quick form (figures come from full runs, not here)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env_throughput_quick_measures_both_games():
    ratios = load("env_throughput").main(["--quick"])
    assert set(ratios) == {"tic_tac_toe", "connect_four"} and all(r > 0 for r in ratios.values())


def test_rollout_throughput_quick_replays_the_arena_batches():
    out = load("rollout_throughput").main(["--quick", "--model", "tiny-llama", "--repeats", "2"])
    assert out["vs_raw"] > 0 and out["vs_serial"] > 0
    tokens = out["tokens"]
    assert all(len(runs) == 2 for runs in tokens.values())
    assert tokens["raw batched"] == tokens["arena"]  # the replay generates exactly the arena's tokens
    assert len(set(tokens["arena"])) == 1  # seeded: every repeat plays the same matches


def test_learner_throughput_quick_runs_both_paths_in_subprocesses():
    out = load("learner_throughput").main(["--quick", "--model", "tiny-llama"])
    assert out["ratio"] > 0 and out["plain"]["peak_rss_mib"] > 0 and out["learner"]["peak_rss_mib"] > 0
