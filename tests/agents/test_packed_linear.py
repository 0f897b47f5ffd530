"""Prepacked bf16 linears generate bit for bit what plain ones do, follow weight updates, and leave the module as it was."""

import pytest
import torch

from agents.backend import SamplingParams
from agents.models import tiny_llama
from agents.packed_linear import can_pack, packed_linears
from agents.transformers_backend import TransformersBackend

needs_bf16 = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="oneDNN has no native bf16 on this CPU (needs AVX-512 BF16 or AMX)",
)

CONVS = [
    [{"role": "user", "content": f"Game {i}: name a cell of the board" + " please" * i}]
    for i in range(6)
]
PARAMS = SamplingParams(max_new_tokens=8, temperature=1.0, seeds=list(range(6)))


def _pair(model, tok):
    """Two backends on one module: prepacked weights, and plain."""
    packed = TransformersBackend((model, tok))
    plain = TransformersBackend((model, tok), pack_weights=False)
    return packed, plain


def _bf16_pair(seed: int):
    model, tok = tiny_llama(seed)
    model = model.to(torch.bfloat16)
    return (model, *_pair(model, tok))


def _same(a, b):
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]


@needs_bf16
def test_packed_generation_is_bit_identical_and_the_modules_are_restored():
    model, packed, plain = _bf16_pair(0)
    out = packed.generate(CONVS, PARAMS)
    _same(out, plain.generate(CONVS, PARAMS))
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert len(packed._packed) == len(linears)  # every linear was packed, the tied LM head included
    assert not any(
        "forward" in m.__dict__ for m in linears
    )  # the class's forward again outside the block
    dists = [["1", "2", "3"]] * len(CONVS)
    assert packed.move_distributions(CONVS, dists, 1.0) == plain.move_distributions(
        CONVS, dists, 1.0
    )


@needs_bf16
def test_packed_weights_follow_in_place_updates_and_replaced_weights():
    model, packed, plain = _bf16_pair(1)
    before = packed.generate(CONVS, PARAMS)
    with torch.no_grad():  # what a learner's step does to the rollout module: write in place
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    after = packed.generate(CONVS, PARAMS)
    _same(after, plain.generate(CONVS, PARAMS))
    assert [g.logprobs for g in after] != [g.logprobs for g in before]
    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach() * 2)  # replaced, not written
    _same(packed.generate(CONVS, PARAMS), plain.generate(CONVS, PARAMS))


@needs_bf16
def test_a_lora_policy_packs_its_base_and_adapters_and_trains_afterwards():
    from peft import LoraConfig, get_peft_model

    model, tok = tiny_llama(2)
    model = get_peft_model(
        model.to(torch.bfloat16),
        LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)  # non-zero adapters, so they matter
    packed, plain = _pair(model, tok)
    _same(packed.generate(CONVS, PARAMS), plain.generate(CONVS, PARAMS))
    ids = torch.tensor([packed.encode(CONVS[0])])
    model(input_ids=ids).logits.float().sum().backward()  # the plain forward has a backward
    assert any(p.grad is not None for n, p in model.named_parameters() if "lora_A" in n)


def test_no_packing_for_fp32_or_when_disabled_and_an_error_restores_the_modules():
    model, tok = tiny_llama(0)
    cache: dict = {}
    with packed_linears(model, cache) as packed:
        assert not packed and not can_pack(model)
    assert cache == {}
    model = model.to(torch.bfloat16)
    with packed_linears(model, cache, enabled=False) as packed:
        assert not packed
    if not can_pack(model):
        pytest.skip("oneDNN has no native bf16 on this CPU (needs AVX-512 BF16 or AMX)")
    with pytest.raises(RuntimeError, match="boom"):
        with packed_linears(model, cache) as packed:
            assert packed and any("forward" in m.__dict__ for m in model.modules())
            raise RuntimeError("boom")
    assert not any("forward" in m.__dict__ for m in model.modules())
