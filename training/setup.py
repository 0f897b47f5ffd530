"""What a training run sets up before its first step: the seeded RNGs, the rollout backend
over the learner's weights, and how the two are kept in step."""

from __future__ import annotations

import random

import numpy as np
import torch

from agents.transformers_backend import TransformersBackend
from training.config import POLICY
from training.learner import Learner
from training.sections import PolicyModel


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's, numpy's and torch's global RNGs; the loop's own numpy Generator."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def make_backend(policy: PolicyModel, learner: Learner, tokenizer):
    """The rollout backend: in-process transformers on the learner's module, or a vLLM engine."""
    if policy.backend == "transformers":
        kwargs = {"max_batch_size": 256, **policy.backend_kwargs}
        if policy.seat_roles:  # per-role policies: each seat plays with its role's adapter
            kwargs["seat_adapters"] = policy.seat_roles
        return TransformersBackend((learner.policy, tokenizer), name=POLICY, **kwargs)
    from agents.vllm_backend import VLLMBackend  # optional: vllm

    kwargs = dict(policy.backend_kwargs)
    if "max_batch_size" in kwargs:  # the shared option's vLLM name
        kwargs["max_num_seqs"] = kwargs.pop("max_batch_size")
    # the learner's dtype unless set (the rollout numerics then match the learner's as closely as vLLM can);
    # prefix caching: a step's prompts share the game's rules, and each match its own history
    kwargs = {"dtype": learner.compute_dtype, "enable_prefix_caching": True, **kwargs}
    return VLLMBackend(policy.model, name=POLICY, **kwargs)


def behaviour_recompute(policy: PolicyModel, learner: Learner) -> str:
    """Which recorded behaviour logprobs the learner replaces with its own (`sequences_from_samples`).

    In bf16 the rollouts and the learner's passes round differently even on the same weights:
    a decode step's kernels and KV cache against one forward pass over the padded batch (SmolLM2-135M's
    recorded and recomputed logprobs of one batch differed by up to 0.44 nats, mean 0.05; a
    vLLM engine's bf16 kernels move the first ratio further: `bench/vllm_training_step.py --numerics`), so the learner
    recomputes them all whenever it or a vLLM engine computes in bf16 (free with one epoch and
    one minibatch: the first update's own logprobs, detached; one more forward pass otherwise).
    fp32 on both sides agrees to ~1e-5: then only constrained turns are recomputed.
    """
    engine_dtype = policy.backend_kwargs.get("dtype", learner.compute_dtype)
    if learner.compute_dtype != "float32" or (
        policy.backend == "vllm" and engine_dtype != "float32"
    ):
        return "all"
    return "constrained"


def sync_weights(learner: Learner, backend) -> None:
    """Make the rollout backend sample from the learner's current weights."""
    if getattr(backend, "model", None) is learner.policy:
        return  # in-process transformers: the same module, already updated in place
    if not hasattr(backend, "load_weights"):
        raise RuntimeError(
            f"backend {getattr(backend, 'name', type(backend).__name__)} neither shares the learner's module nor has load_weights"
        )
    backend.load_weights(learner.policy_state_dict())
