"""The learner's configuration: the optimizer, the micro-batch budget, precision and LoRA
(`training.learner.Learner` reads it; the policy loss's own section is `training.loss.LossConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.machine import PRECISIONS
from core.typed_config import above, at_least, check_fields, option, within
from training.loss import LossConfig

BF16_ROUNDINGS = ("nearest", "stochastic")  # how the fp32 masters are rounded into a bf16 copy


def _strings(v) -> bool:
    """A non-empty list of non-empty strings."""
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v)


@dataclass
class LearnerConfig:
    lr: float = option(1e-5, check=above(0))
    """AdamW learning rate (peak, after warmup)"""
    weight_decay: float = option(0.0, check=at_least(0))
    """AdamW weight decay"""
    betas: tuple[float, float] = option(
        (0.9, 0.999),
        check=(
            lambda v: len(v) == 2 and all(type(b) in (int, float) and 0 <= b < 1 for b in v),
            "two numbers in [0, 1)",
        ),
    )
    """AdamW betas"""
    max_grad_norm: float = option(1.0, check=at_least(0))
    """clip the global gradient norm to this (0: no clipping)"""
    lr_schedule: str = option("constant", choices=("constant", "cosine"))
    """"constant" or "cosine" (decays to min_lr_ratio * lr at total_steps)"""
    warmup_steps: int = option(0, check=at_least(0))
    """linear warmup steps"""
    total_steps: int = option(0, check=at_least(0))
    """cosine horizon in optimizer steps; 0: the run's steps x epochs x minibatches when it starts
    (a resumed run keeps its horizon whatever --steps says)"""
    min_lr_ratio: float = option(0.0, check=within(0, 1))
    """cosine floor as a fraction of lr"""
    micro_batch_tokens: int = option(8192, check=at_least(1))
    """padded tokens per micro-batch (gradient accumulation beyond that); with shared_prefix,
    a micro-batch's prefix tree computes at most half as many distinct tokens
    (`SHARED_BUDGET_SHARE`)"""
    shared_prefix: bool | str = option("auto", choices=(True, False, "auto"))
    """compute each token the step's sequences share once (a prefix tree of the micro-batch: one
    game's rules, one conversation's earlier turns), every continuation attending to it: the
    same loss and gradients as one pass per sequence, in fewer FLOPs (`training.prefix_tree`).
    Needs a plain linear LM head and sdpa or eager attention; otherwise, or false, every
    sequence runs whole. Works with offload_optimizer and gradient_checkpointing (a
    checkpointed layer recomputes with the same gathered past: the same steps). auto (the
    default): on a CPU, where it is faster; off on a GPU, where one padded row per sequence is
    faster (docs/results/gpu.md)"""
    temperature: float = option(
        1.0, check=(lambda v: v > 0, "> 0 (greedy rollouts have no usable logprobs)")
    )
    """sampling temperature of the rollouts: logits are divided by it"""
    lora_rank: int = option(0, check=at_least(0))
    """LoRA rank; 0 trains all weights"""
    lora_alpha: float = option(16.0, check=above(0))
    """LoRA scaling numerator"""
    lora_dropout: float = option(0.0, check=within(0, 1, closed_high=False))
    """LoRA dropout"""
    lora_targets: str | list[str] = option(
        "all-linear",
        check=(
            lambda v: (isinstance(v, str) and bool(v)) or _strings(v),
            "a module pattern or a list of module names",
        ),
    )
    """modules LoRA adapts (peft target_modules)"""
    log_entropy: bool = True
    """compute the policy entropy as a metric even when entropy_coef is 0"""
    value_coef: float = option(0.0, check=at_least(0))
    """weight of the value loss; > 0 adds the value head (the `critic` estimator needs it)"""
    precision: str = option("auto", choices=PRECISIONS)
    """compute dtype of the learner and of the rollouts that share its module: float32, bfloat16
    (bf16 weights, fp32 master weights in the optimizer) or auto (bf16 on a GPU; on a CPU
    whichever of the two multiplies faster, measured at start)"""
    bf16_rounding: str = option("nearest", choices=BF16_ROUNDINGS)
    """how the fp32 masters are rounded into the bf16 copy after each step: "nearest", or
    "stochastic" (up or down with odds by distance, so the copy equals the masters on average:
    with a small lr most updates are below bf16's resolution, and a nearest-rounded copy only
    moves once they add up to half of it). nearest, the cheaper, is the default; the two compared:
    docs/results/bf16.md"""
    offload_optimizer: bool = False
    """keep the fp32 master weights, their gradients and the AdamW state in host memory (CPU):
    the device holds only the copy the passes run on (bf16 under precision bfloat16/auto on a
    GPU); each step moves the gradients to the host, steps there and copies the weights back.
    The same arithmetic as without; a trained weight takes 4 bytes of the device (its bf16 copy
    and gradient) instead of 18 (a 4B full fine-tune: 60 GiB off the card)"""
    gradient_checkpointing: bool = False
    """keep only each decoder layer's input from the forward pass and recompute the layer in the
    backward (transformers' gradient checkpointing): the same gradients for about a third more
    compute, and activation memory of one layer instead of all"""
    magnet_every: int = option(0, check=at_least(0))
    """with loss.magnet_coef > 0: copy the policy into the magnet every N optimizer steps (Magnetic
    Mirror Descent's moving magnet); 0: the magnet stays the initial policy"""
    loss: LossConfig = field(default_factory=LossConfig)
    """the policy loss"""

    def __post_init__(self):
        if isinstance(self.loss, dict):
            self.loss = LossConfig(**self.loss)
        check_fields(self)
