"""A frozen LM head (a LoRA policy's) generates exactly what a trainable one does, through the same kernels."""

import pytest
import torch

from agents.backend import SamplingParams
from agents.models import tiny_llama
from agents.transformers_backend import TransformersBackend


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_lora_policy_with_a_frozen_head_generates_what_a_trainable_head_does(dtype):
    from peft import LoraConfig, get_peft_model

    model, tok = tiny_llama(0)
    model = get_peft_model(
        model.to(dtype), LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    backend = TransformersBackend((model, tok))
    convs = [
        [{"role": "user", "content": f"Game {i}: name a cell of the board" + " please" * i}]
        for i in range(6)
    ]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seeds=list(range(6)))
    head = model.get_output_embeddings().weight
    assert not head.requires_grad  # what get_peft_model leaves
    frozen = backend.generate(convs, params)
    head.requires_grad_(True)
    trainable = backend.generate(convs, params)
    assert [g.token_ids for g in frozen] == [g.token_ids for g in trainable]
    assert [g.logprobs for g in frozen] == [
        g.logprobs for g in trainable
    ]  # bit for bit: one mm either way
    first = backend._prefill([backend.encode(c) for c in convs])[0]
    head.requires_grad_(False)
    assert torch.equal(first, backend._prefill([backend.encode(c) for c in convs])[0])
