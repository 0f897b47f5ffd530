"""The transfer study driver (experiments/transfer/transfer_study.py): configs of the variants, the paired
table on hand-made records, and one end-to-end study on the tiny model."""

import functools
import json
import math
from pathlib import Path

import pytest
import yaml

from core.records import MatchRecord, TurnRecord
from evaluation.suites import suite
from experiments.transfer import transfer_study as ts


def recipe() -> dict:
    return yaml.safe_load(open(ts.RECIPE))


def test_variants_differ_from_the_recipe_only_in_their_normalisation_or_estimator(tmp_path):
    cfgs = {v: ts.variant_config(recipe(), v, tmp_path) for v in ts.VARIANTS}
    assert cfgs["mars"].advantage.estimator == "mars" and cfgs["mars"].advantage.agent_specific_norm
    assert not cfgs["mars_shared_norm"].advantage.agent_specific_norm
    assert cfgs["grpo"].advantage.estimator == "grpo"
    for v, cfg in cfgs.items():
        assert cfg.run_dir == str(tmp_path / v / "run")
        same = lambda c: {
            k: val
            for k, val in json.loads(json.dumps(c.__dict__, default=str)).items()
            if k not in ("advantage", "run_dir")
        }
        assert same(cfg) == same(cfgs["mars"]), v  # same budget, seeds, games, learner
    with pytest.raises(ValueError, match="unknown variant 'marz'"):
        ts.variant_config(recipe(), "marz", tmp_path)
    with pytest.raises(ValueError, match="variant grpo: learner.lr must be > 0"):
        ts.variant_config(recipe(), "grpo", tmp_path, {"learner": {"lr": -1}})


def test_the_evaluation_is_the_held_out_suite_plus_the_training_games_with_their_params(tmp_path):
    cfg = ts.variant_config(recipe(), "mars", tmp_path)
    ec = ts.eval_config(cfg, "final", tmp_path / "eval", matches=10, seed=7, samples=8)
    names = [g.name for g in ec.games]
    assert names[:2] == [g.name for g in suite("held_out")] and set(names[2:]) == {
        "tic_tac_toe",
        "kuhn_poker",
    }  # hanabi: no fixed opponent
    assert all(g.params == {"illegal_reward": -2.0} for g in ec.games[2:])
    # trained and base prompt and sample alike; only the weights differ
    assert ec.agent["model"] == cfg.run_dir and ec.baseline["model"] == cfg.model
    assert {k: v for k, v in ec.agent.items() if k != "model"} == {
        k: v for k, v in ec.baseline.items() if k != "model"
    }
    assert (
        ec.agent["constrained"] is False
        and ec.agent["fallback"] == "forfeit"
        and ec.agent["temperature"] == cfg.eval.temperature
    )
    assert ts.eval_config(cfg, "best", tmp_path, 10, 7, 8).agent["model"].endswith("/run/best")


def _record(
    who: str, k: int, outcome: str, ret: float, valid: list[bool], seat: str = "player_0"
) -> MatchRecord:
    other = "player_1" if seat == "player_0" else "player_0"
    turns = [
        TurnRecord(index=i, player=seat, agent=who, move="x", action=0, valid=v, token_ids=[1])
        for i, v in enumerate(valid)
    ]
    return MatchRecord(
        match_id=f"{who}|00.kuhn_poker|00.random|{k:05d}",
        game="kuhn_poker",
        params={},
        seed=k,
        seats={seat: who, other: "random"},
        turns=turns,
        returns={seat: ret, other: -ret},
        outcome={seat: outcome, other: {"win": "loss", "loss": "win", "draw": "draw"}[outcome]},
    )


def test_reuse_baseline_copies_only_the_baselines_matches(tmp_path):
    from tournaments.store import Store

    src, dst = tmp_path / "a", tmp_path / "b"
    src.mkdir()
    recs = [_record("agent", 0, "win", 1.0, [True]), _record("baseline", 0, "loss", -1.0, [True])]
    (src / "eval.jsonl").write_text("".join(r.to_json() + "\n" for r in recs))
    key = "exploitability|baseline|kuhn_poker|{}|8"
    with Store(src / "eval.db") as s:
        s.set_meta(key, json.dumps({"game": "kuhn_poker", "exploitability": 0.5}))
    assert ts.reuse_baseline(src, dst, samples=8) == 1
    assert [json.loads(ln)["match_id"] for ln in (dst / "eval.jsonl").read_text().splitlines()] == [
        recs[1].match_id
    ]
    with Store(dst / "eval.db") as d:
        assert json.loads(d.meta(key))["exploitability"] == 0.5
    assert ts.reuse_baseline(src, dst, samples=8) == 0  # never over an evaluation that has begun


def test_baseline_from_a_folder_without_an_evaluation_is_refused_before_training(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(TINY_RECIPE))
    with pytest.raises(ValueError, match="no evaluation there"):
        ts.study(
            str(path),
            ["mars"],
            tmp_path / "out",
            matches=2,
            seed=3,
            samples=1,
            policy="final",
            baseline_from=tmp_path / "none",
        )
    assert not (tmp_path / "out").exists()


TINY_RECIPE = {
    "model": "tiny-llama",
    "seed": 1,
    "steps": 2,
    "threads": 1,
    "games": [
        {"name": "tic_tac_toe", "params": {"illegal_reward": -2.0}},
        {"name": "kuhn_poker", "params": {"illegal_reward": -2.0}},
    ],
    "matches_per_step": 2,
    "concurrency": 8,
    "agent": {
        "constrained": False,
        "max_retries": 0,
        "fallback": "forfeit",
        "temperature": 1.0,
        "max_new_tokens": 4,
    },
    "learner": {"lr": 1e-3, "loss": {"kl_coef": 0.1}},
    "eval": {
        "every": 1,
        "games": 2,
        "select_games": 2,
        "temperature": 1.0,
        "opponents": ["random"],
        "held_out": [{"name": "leduc_poker", "opponents": ["random"]}],
    },
    "checkpoint_every": 1,
}


@pytest.mark.slow  # ~40 s: two tiny trainings and two paired evaluations over the whole held-out suite
def test_study_end_to_end_on_the_tiny_model(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(TINY_RECIPE))
    out = tmp_path / "study"
    result = ts.study(
        str(path), ["mars", "grpo"], out, matches=2, seed=3, samples=1, policy="final"
    )
    assert set(result["variants"]) == {"mars", "grpo"}
    held = {g.name for g in suite("held_out")}
    for v, s in result["variants"].items():
        assert (
            s["run"]["steps"] == 2
            and s["run"]["games"] == 4
            and s["run"]["rollout_tokens_per_s"] > 0
        )
        assert s["policy"] == str(
            out / v / "run" / "checkpoints" / "step_00000002"
        )  # the final checkpoint, by name
        cells = {(r["game"], r["opponent"]) for r in s["paired"]}
        assert {g for g, _ in cells} == held | {"tic_tac_toe", "kuhn_poker"}
        assert (
            ("connect_four", "mcts:1000") in cells
            and ("leduc_poker", "cfr") in cells
            and ("connect_four", "all") in cells
        )
        for r in s["paired"]:
            for m in ("non_losing", "win_rate", "mean_return", "legal_move_rate"):
                x = r[m]
                assert math.isnan(x["diff"]) or x["ci"][0] <= x["diff"] <= x["ci"][1]
        assert {r["agent"] for r in s["exploitability"]} == {"agent", "baseline"}
        assert all(
            r["game"] == "kuhn_poker" and 0 <= r["exploitability"] <= 3 for r in s["exploitability"]
        )
    # the base model met the same matches in both evaluations: the second took them from the first
    base = lambda v: sorted(
        ln
        for ln in (out / v / "eval" / "eval.jsonl").read_text().splitlines()
        if json.loads(ln)["match_id"].startswith("baseline|")
    )
    assert base("mars") == base("grpo") and base("mars")
    expl = {
        v: [r for r in s["exploitability"] if r["agent"] == "baseline"]
        for v, s in result["variants"].items()
    }
    assert expl["mars"] == expl["grpo"]
    md = (out / "study.md").read_text()
    assert (
        "## Ablation: held-out differences" in md
        and "| connect_four | mcts:100 |" in md
        and "grpo non-losing" in md
    )
    assert (out / "curves.png").stat().st_size > 0 and json.loads((out / "study.json").read_text())[
        "seed"
    ] == 3
    # a second call trains nothing more and plays no match again
    mtimes = {v: (out / v / "run" / "metrics.jsonl").stat().st_mtime for v in result["variants"]}
    again = ts.study(str(path), ["mars", "grpo"], out, matches=2, seed=3, samples=1, policy="final")
    assert again["variants"]["mars"]["paired"] == result["variants"]["mars"]["paired"]
    assert {
        v: (out / v / "run" / "metrics.jsonl").stat().st_mtime for v in result["variants"]
    } == mtimes
    # another training seed's study takes the base matches from this one instead of playing them
    out2 = tmp_path / "study_seed1"
    other = ts.study(
        str(path),
        ["mars"],
        out2,
        matches=2,
        seed=3,
        samples=1,
        policy="final",
        overrides={"seed": 1},
        baseline_from=out / "mars" / "eval",
    )
    assert sorted(
        ln
        for ln in (out2 / "mars" / "eval" / "eval.jsonl").read_text().splitlines()
        if json.loads(ln)["match_id"].startswith("baseline|")
    ) == base("mars")
    assert [
        r for r in other["variants"]["mars"]["exploitability"] if r["agent"] == "baseline"
    ] == expl["mars"]


def test_the_gpu_config_is_the_same_recipe_and_resolves_on_the_cpu():
    """configs/train_mars_qwen3_4b.yaml: validates here without loading the 4B model; every
    GPU-only choice is a config value that resolves on a CPU-only machine."""
    from core.machine import compute_dtype
    from training.config import load_config

    gpu, cpu = load_config("configs/train_mars_qwen3_4b.yaml"), load_config(ts.RECIPE)
    assert gpu.model == "Qwen/Qwen3-4B" and gpu.backend == "vllm"
    # the GPU-only choices
    assert gpu.device == "auto" and gpu.learner.precision == "auto"
    assert compute_dtype(gpu.learner.precision, "cpu") in (
        "bfloat16",
        "float32",
    )  # what "auto" takes here
    assert set(gpu.backend_kwargs) == {
        "dtype",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "max_model_len",
    }
    assert (
        0 < gpu.backend_kwargs["gpu_memory_utilization"] < 1
        and gpu.backend_kwargs["tensor_parallel_size"] >= 1
    )
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        EngineArgs = None
    if EngineArgs is not None:  # the engine takes every option by name
        assert set(gpu.backend_kwargs) <= set(EngineArgs.__dataclass_fields__)
    # the same recipe as the CPU run: unconstrained replies that forfeit, per-(game, player) mars, PPO + KL
    for key in (
        "advantage.estimator",
        "advantage.agent_specific_norm",
        "advantage.format_reward",
        "advantage.draw_reward",
        "agent.constrained",
        "agent.max_retries",
        "agent.fallback",
        "agent.temperature",
        "learner.loss.clip_low",
        "learner.loss.clip_high",
        "learner.loss.dual_clip",
        "learner.loss.kl_coef",
        "learner.loss.aggregation",
        "league.self_play",
    ):
        get = lambda c: functools.reduce(getattr, key.split("."), c)
        assert get(gpu) == get(cpu), key
    assert [g.name for g in gpu.games] == [g.name for g in cpu.games]
    assert [g["name"] for g in gpu.eval.held_out] == [
        g["name"] for g in cpu.eval.held_out
    ]  # the CPU curves may skip costly opponents
    assert all(
        set(c["opponents"]) <= set(g["opponents"])
        for g, c in zip(gpu.eval.held_out, cpu.eval.held_out)
    )
    assert (
        ts.variant_config(
            yaml.safe_load(open("configs/train_mars_qwen3_4b.yaml")), "mars_shared_norm", Path("x")
        ).device
        == "auto"
    )
