"""The learner's compute precision: fp32 master weights and the bf16 copy the passes run on,
how the masters are rounded into that copy, and the bf16 attention of the learner's own passes.

`precision: float32` trains the module itself. `bfloat16` (what `auto` takes on a GPU, and on a
CPU whose bf16 matmuls are faster: `core.machine.compute_dtype`): a bf16 copy of the model
(`Learner.policy`) runs every forward and backward pass, and the optimizer steps fp32 master
weights (`Learner.model`, what checkpoints hold) with the bf16 gradients cast up
(`grads_to_masters`); after each step the masters are rounded into the copy (`round_masters`),
to the nearest bf16 or stochastically (`stochastic_round`). bf16 weights rather than bf16
autocast over the fp32 module: autocast re-casts every weight on every call. The rollout
backend samples from the copy itself, so the behaviour log-probabilities come from the same
bf16 weights the learner recomputes them with. On a CPU in bf16 the learner's own passes run
`bf16_eager_attention` (torch's CPU sdpa kernel is no faster in bf16 than in fp32); the rollouts
keep the module's attention. Figures: docs/results/benchmarks.md ("The learner's precision").
"""

from __future__ import annotations

import contextlib

import torch

BF16_ATTENTION = "learner_bf16_eager"


def stochastic_round(
    x: torch.Tensor,
    dtype: torch.dtype,
    generator: torch.Generator,
    out: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp32 `x` rounded to bf16 up or down at random, with odds by distance, so the result's
    expectation is `x`: 16 random low bits added to its bit pattern, then cut off (sign and
    magnitude: a negative value's magnitude rounds the same way). Other dtypes: plain cast.
    Into `out` if given; `scratch` (int32, at least x.numel()) spares a fresh temporary, whose
    page faults cost more than the arithmetic on a CPU."""
    out = torch.empty_like(x, dtype=dtype) if out is None else out
    if dtype != torch.bfloat16 or x.dtype != torch.float32:
        return out.copy_(x)
    bits = (
        torch.empty(x.shape, dtype=torch.int32, device=x.device)
        if scratch is None
        else scratch[: x.numel()].view(x.shape)
    )
    bits.random_(0, 1 << 16, generator=generator)
    bits.add_(x.contiguous().view(torch.int32)).bitwise_and_(
        -65536
    )  # the low 16 bits zero: exact in bf16
    return out.copy_(bits.view(torch.float32))


def trainable_pairs(model, policy) -> list[tuple[torch.nn.Parameter, torch.nn.Parameter]]:
    """(master, policy copy) of every trainable weight; empty when they are one module."""
    if policy is model:
        return []
    trainable = lambda m: [p for p in m.parameters() if p.requires_grad]  # noqa: E731
    return list(zip(trainable(model), trainable(policy), strict=True))


def grads_to_masters(pairs: list[tuple[torch.nn.Parameter, torch.nn.Parameter]]) -> None:
    """Move each copy's (bf16) gradient onto its fp32 master, cast up; the copy's is cleared."""
    for master, copied in pairs:
        master.grad = (
            None
            if copied.grad is None
            else copied.grad.to(device=master.device, dtype=torch.float32)
        )
        copied.grad = None


@torch.no_grad()
def round_masters(
    pairs: list[tuple[torch.nn.Parameter, torch.nn.Parameter]],
    rounding: str,
    seed: int,
    device: torch.device,
    scratch: torch.Tensor | None,
) -> torch.Tensor | None:
    """Round the trainable masters into the policy copy.

    Args:
        pairs: (master, copy) of each trainable weight (`trainable_pairs`).
        rounding: "nearest" (a plain cast) or "stochastic" (`stochastic_round`).
        seed: seeds the stochastic rounding's generator (the learner's step count, so a
            resumed run rounds alike).
        device: where the masters live (the generator's and the scratch's device).
        scratch: the int32 random bits of an earlier call, reused when large enough.

    Returns:
        The scratch to pass next time (None while rounding to the nearest).
    """
    if rounding == "nearest" or not pairs:
        for master, copied in pairs:
            copied.copy_(master)
        return scratch
    generator = torch.Generator(device=device).manual_seed(seed)
    largest = max(master.numel() for master, _ in pairs)
    if scratch is None or scratch.numel() < largest:
        scratch = torch.empty(largest, dtype=torch.int32, device=device)
    for master, copied in pairs:
        stochastic_round(master, copied.dtype, generator, out=copied, scratch=scratch)
    return scratch


def bf16_eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention with the softmax in the compute dtype (no fp32 copy of
    the scores), the scale applied to the queries and the mask added in place. On a CPU in
    bf16 its matmuls run at bf16 speed, where torch's CPU flash kernel (sdpa) is no faster in
    bf16 than in fp32."""
    groups = query.shape[1] // key.shape[1]
    if (
        groups > 1
    ):  # grouped-query attention: each key/value head serves `groups` query heads (transformers' repeat_kv)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(
        query * scaling, key.transpose(2, 3)
    )  # the matmul keeps its inputs, not this output
    if attention_mask is not None:
        scores.add_(attention_mask)
    weights = torch.nn.functional.dropout(
        torch.softmax(scores, dim=-1), p=dropout, training=module.training
    )
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def register_bf16_attention() -> str:
    """Register `bf16_eager_attention` with transformers (with eager's additive float mask); its name."""
    # start-up time: transformers, for both
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(BF16_ATTENTION, bf16_eager_attention)
    AttentionMaskInterface.register(BF16_ATTENTION, eager_mask)
    return BF16_ATTENTION


def learner_attention(dtype: str, device: torch.device) -> str | None:
    """The attention the learner's own passes run (not the rollouts that share its module):
    `bf16_eager_attention` in bf16 on a CPU (registered here), else None (the module's own)."""
    return register_bf16_attention() if dtype == "bfloat16" and device.type == "cpu" else None


@contextlib.contextmanager
def attention_implementation(model, name: str | None):
    """Run `model` with attention implementation `name` (None: as it is) inside the block."""
    config = getattr(model, "config", None)
    if name is None or config is None:
        yield
        return
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before
