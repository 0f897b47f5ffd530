"""The self-play loop end to end: a short real run, exact resume, the checkpoint as an agent, free-text and cached-prompt rollouts."""

import json
import math
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file, load_model

from agents import checkpoint
from agents.models import tiny_llama
from cli.main import main as cli_main
from core.records import read_jsonl
from tests.tiny_run import TINY, quiet, tiny
from training import rollouts
from training.league import League
from training.selfplay import POLICY, load_config, train


def test_short_run_writes_checkpoints_tensorboard_metrics_and_curve(tmp_path):
    cfg = tiny(tmp_path)
    out = train(cfg, console=quiet())
    run = tmp_path / "run"
    assert out["step"] == 3 and out["games"] == 3 * 8
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for key in (
        "reward",
        "win_rate",
        "invalid_rate",
        "response_length",
        "approx_kl_behaviour",
        "entropy",
        "clip_frac",
        "rollout_tokens_per_s",
        "learn_tokens_per_s",
        "grad_norm",
    ):
        assert all(math.isfinite(m[key]) for m in metrics), key
    assert all(
        m["invalid_rate"] == 0.0 and m["response_length"] == 2.0 for m in metrics
    )  # constrained: digit + EOS
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2, 3]  # before training, every 2 steps, at the end
    assert all(e["games"] == 8 and e["wins"] + e["draws"] + e["losses"] == 8 for e in evals)
    assert (run / "eval.png").stat().st_size > 1000
    best = json.loads(
        (run / "best" / "meta.json").read_text()
    )  # the first evaluation with the top selection score
    assert (
        best["step"] == max(evals, key=lambda e: (e["selection_score"], -e["step"]))["step"]
        and out["best"] == best["selection_score"]
    )
    assert list((run / "tb").glob("events.out.tfevents.*"))
    ckpt = checkpoint.latest(run / "checkpoints")
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["step"] == 3 and meta["learner_step"] == 3 and meta["state"]["games"] == 24
    league = League.from_state_dict(meta["league"])
    names = [o.name for o in league.opponents]
    assert names == ["random", "ckpt-2", "ckpt-3"]  # max_checkpoints 2: ckpt-1 retired
    assert sorted(f.name for f in (run / "league").iterdir()) == [
        "step_00000002.safetensors",
        "step_00000003.safetensors",
    ]
    assert sum(o.games for o in league.opponents) > 0  # PFSP table updated from league matches
    # the snapshot holds the policy's weights at that step
    a, b = tiny_llama(0)[0], tiny_llama(1)[0]
    a.load_state_dict(
        load_file(str(run / "league" / "step_00000003.safetensors")), strict=False
    )  # lm_head is tied
    load_model(b, str(ckpt / "model.safetensors"))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize(
    "variant",
    [
        "mars",
        *(
            pytest.param(v, marks=pytest.mark.slow)
            for v in ("critic", "restarts", "stochastic", "exploiter")
        ),
    ],
)
def test_resume_continues_exactly(tmp_path, variant):
    """4 steps straight == 2 steps, then --resume for 2 more (league: self-play, random, snapshots)."""
    over = {"steps": 4, "checkpoint_every": 2, "eval": {"every": 0}}
    critic = variant == "critic"
    if critic:  # the value head and its optimizer state resume too
        over.update(
            advantage={"estimator": "critic", "gamma": 1.0}, learner={"lr": 3e-3, "value_coef": 0.5}
        )
    if (
        variant == "restarts"
    ):  # every self-play pair restarts from a lost position: the buffer resumes too
        over.update(games=[{"name": "tic_tac_toe", "restarts": 1.0}])
    if (
        variant == "stochastic"
    ):  # the bf16 copy is rounded from the loaded masters as the straight run rounded it
        over.update(learner={"lr": 3e-3, "precision": "bfloat16", "bf16_rounding": "stochastic"})
    if variant == "exploiter":  # it walks the policy at steps 1 and 3, also in the resumed run
        over.update(league={**TINY["league"], "bots": ["random", "exploiter:2"]})
    train(tiny(tmp_path, "straight", **over), console=quiet())
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    with pytest.raises(ValueError, match="pass --resume"):
        train(tiny(tmp_path, "split", **over), console=quiet())
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    a = load_file(
        str(tmp_path / "straight" / "checkpoints" / "step_00000004" / "model.safetensors")
    )
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000004" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    mb = [json.loads(x) for x in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in mb] == [1, 2, 3, 4]
    assert [(m["reward"], m["loss"]) for m in ma] == [(m["reward"], m["loss"]) for m in mb]
    if critic:
        assert [m["value_loss"] for m in ma] == [m["value_loss"] for m in mb] and ma[-1][
            "value_loss"
        ] > 0
    if variant == "restarts":
        held = checkpoint.read_meta(tmp_path / "split" / "checkpoints" / "step_00000002")["state"][
            "restarts"
        ]
        assert held and all(
            game == "tic_tac_toe" and 1 <= len(actions) <= 8 for game, _, _, actions in held
        )
    # the weights did change after the resume
    c = load_file(str(tmp_path / "split" / "league" / "step_00000003.safetensors"))
    assert not all(torch.equal(c[k], a[k]) for k in c.keys() & a.keys())


def test_checkpoint_initial_keeps_the_untrained_policy_and_a_resume_from_it_is_the_unbroken_run(
    tmp_path,
):
    """checkpoint_initial: step_0 holds the network the run starts from (the seed's tiny Llama);
    resuming from that checkpoint alone trains what the unbroken run trained."""
    over = {
        "seed": 3,
        "steps": 2,
        "checkpoint_every": 2,
        "checkpoint_initial": True,
        "keep_checkpoints": 0,
        "eval": {"every": 0},
    }
    train(tiny(tmp_path, "straight", **over), console=quiet())
    ckpts = tmp_path / "straight" / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_00000000", "step_00000002"]
    initial = load_file(str(ckpts / "step_00000000" / "model.safetensors"))
    own = tiny_llama(seed=3)[0].state_dict()  # TINY's network, built apart from the run
    assert initial and all(torch.equal(v, own[k]) for k, v in initial.items())
    trained = load_file(str(ckpts / "step_00000002" / "model.safetensors"))
    assert not all(torch.equal(trained[k], initial[k]) for k in initial)

    split = tmp_path / "split"
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    shutil.rmtree(split / "checkpoints" / "step_00000002")  # as if killed before step 2's save
    (split / "checkpoints" / "latest").unlink(missing_ok=True)
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    again = load_file(str(split / "checkpoints" / "step_00000002" / "model.safetensors"))
    assert all(torch.equal(again[k], trained[k]) for k in trained)


@pytest.mark.parametrize("lora", [0, pytest.param(4, marks=pytest.mark.slow)])
def test_a_checkpoint_plays_as_an_agent_with_its_trained_weights_and_settings(
    tmp_path, lora, capsys
):
    from agents import make_agent
    from agents.models import find_checkpoint
    from agents.models import load_model as load_named

    cfg = tiny(
        tmp_path,
        steps=2,
        learner={"lr": 3e-3, "lora_rank": lora},
        league={"snapshot_every": 0},
        eval={"every": 2},
    )
    train(cfg, console=quiet())
    run = tmp_path / "run"
    folder = find_checkpoint(str(run))
    assert folder == run / "checkpoints" / "step_00000002"
    assert (
        find_checkpoint(str(run / "checkpoints")) == folder
        and find_checkpoint(str(tmp_path)) is None
    )
    model, _ = load_named(str(run), dtype="float32")  # auto is bf16 on a CPU with native bf16
    base, _ = tiny_llama(seed=0)
    trained = dict(model.named_parameters())
    assert set(trained) == set(dict(base.named_parameters()))  # plain names: LoRA merged away
    assert any(not torch.equal(trained[k], v) for k, v in base.named_parameters())
    if not lora:  # the saved weights themselves
        saved = load_file(str(folder / "model.safetensors"))
        assert all(torch.equal(trained[k], saved[k]) for k in saved if k in trained)
    agent = make_agent(f"llm:{folder},temperature=0")
    assert (
        agent.config.prompt == "compact"
        and agent.config.constrained
        and agent.config.temperature == 0.0
    )
    assert (
        cli_main(
            [
                "play",
                "tic_tac_toe",
                "--agents",
                f"llm:{run},temperature=0",
                "random",
                "--matches",
                "2",
            ]
        )
        == 0
    )
    assert "warning" not in capsys.readouterr().err
    # other params than it trained on (another board rendering): one warning line naming both
    assert (
        cli_main(
            [
                "play",
                "tic_tac_toe",
                "--agents",
                f"llm:{run}",
                "random",
                "--matches",
                "2",
                "--param",
                "board=line",
            ]
        )
        == 0
    )
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert (
        len(err) == 1
        and err[0].startswith("warning")
        and "with params {} but plays it with {'board': 'line'}" in err[0]
    )
    best = json.loads((run / "best" / "meta.json").read_text())
    assert find_checkpoint(str(run / "best")) == run / "best" and best["step"] in (0, 2)
    if not lora:  # a tournament between every checkpoint the run kept, its best policy and a bot
        tour = tmp_path / "checkpoints.yaml"
        tour.write_text(
            yaml.safe_dump(
                {
                    "name": "checkpoints",
                    "format": "round_robin",
                    "games": ["tic_tac_toe"],
                    "games_per_pairing": 2,
                    "players": {
                        "tiny": {"checkpoints": str(run), "temperature": 0},
                        "random": "random",
                    },
                }
            )
        )
        assert cli_main(["tournament", str(tour), "--db", str(tmp_path / "t.db")]) == 0
        names = {s.agent for r in read_jsonl(tmp_path / "t.jsonl") for s in r.turns}
        expected = {f"tiny@{int(d.name[5:])}" for d in (run / "checkpoints").glob("step_*")} | {
            "tiny@best",
            "random",
        }
        assert names == expected and "tiny@2" in names
    (folder / "meta.json").write_text('{"step": 2}')  # a meta.json without the run config
    with pytest.raises(ValueError, match="names no base model"):
        load_named(str(folder))


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_free_text_rollouts_start_every_update_at_ratio_one(tmp_path, precision):
    """Unconstrained replies, recorded by the rollout backend: in fp32 its logprobs are the
        learner's to ~1e-5 and are kept; in bf16 a decode step rounds differently from the
    XX
        every step sits at ratio 1 exactly, nothing clipped."""
    if precision == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no native bf16 on this CPU (needs AVX-512 BF16 or AMX)")
    cfg = tiny(
        tmp_path,
        steps=2,
        agent={
            "constrained": False,
            "answer_format": "brackets",
            "max_new_tokens": 6,
            "fallback": "random",
        },
        league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
        eval={"every": 0},
        learner={"precision": precision, "lr": 1e-3},
    )
    train(cfg, console=quiet())
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    tol = 0.0 if precision == "bfloat16" else 1e-4
    for m in rows:
        assert (
            abs(m["first_ratio_min"] - 1) <= tol
            and abs(m["first_ratio_max"] - 1) <= tol
            and m["first_clip_frac"] == 0.0
        ), m
        assert m["response_length"] > 2  # free text: longer than a constrained digit + EOS


def test_prompt_cache_prefills_each_distinct_prompt_once_a_step_with_exact_logprobs(
    tmp_path, monkeypatch
):
    """`prompt_cache: true` on the strict memory-1 prisoner's dilemma (five distinct prompts):
    a step's policy turns prefill each distinct prompt once, and the recorded behaviour
    logprobs are what the learner recomputes (the step's first minibatch has ratio 1)."""
    from rich.console import Console

    from agents.transformers_backend import TransformersBackend
    from core.records import read_json_lines

    prefilled, played = [], []
    real_prefill, real_play = TransformersBackend._prefill_batch, rollouts.play

    def counting_prefill(self, prompts):
        prefilled.extend(tuple(p) for p in prompts)
        return real_prefill(self, prompts)

    def recording_play(*args, **kwargs):
        for rec in real_play(*args, **kwargs):
            played.append(rec)
            yield rec

    monkeypatch.setattr(TransformersBackend, "_prefill_batch", counting_prefill)
    monkeypatch.setattr(rollouts, "play", recording_play)
    cfg = load_config(
        "experiments/reciprocity/train_ipd_aa_causal.yaml",
        {
            "steps": 1,
            "matches_per_step": 8,
            "concurrency": 8,
            "prompt_cache": True,
            "run_dir": str(tmp_path / "run"),
        },
    )
    train(cfg, console=Console(quiet=True))
    turns = [t for rec in played for t in rec.turns if t.agent == POLICY]
    distinct = {tuple(t.prompt_token_ids) for t in turns}
    assert len(turns) == 160 and len(distinct) <= 5
    assert sorted(prefilled) == sorted(distinct)  # each distinct prompt once, nothing else
    row = next(read_json_lines(tmp_path / "run" / "metrics.jsonl"))
    assert abs(row["first_ratio_min"] - 1) < 1e-4 and abs(row["first_ratio_max"] - 1) < 1e-4, row
