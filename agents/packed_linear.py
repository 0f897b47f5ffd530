"""Prepacked bf16 linear weights for CPU decoding.

On a CPU, `F.linear` in bf16 goes to oneDNN, which reorders the weight into its blocked
layout on every call. A decode step multiplies a few rows by every weight of the model, so
that reorder costs as much as the product. fp32 goes to MKL, which gains nothing from
prepacking, so only bf16 weights are packed. Measurements: docs/results/benchmarks.md#machine-notes.

`packed_linears(model)` is a context manager: inside it every bf16 `nn.Linear` of the model
(LoRA's adapters included) runs `torch.ops.mkldnn._linear_pointwise` on a packed copy of
its weight. The outputs are bit-identical to `F.linear` on the same (contiguous) input, so
packing changes no number a rollout records (tests/agents/test_packed_linear.py). The packed
copies are kept in a dict the caller holds (the backend, one per model) and repacked when a
weight changes (`Tensor._version` counts in-place writes: a learner's update,
`load_state_dict`), which costs ~0.2 s for SmolLM2-135M (the LM head 45 ms). They take as
much memory as the linear weights (the tied LM head gets its own copy). Outside the context
the modules are untouched, so a learner can train the same module (the packed op has no
backward). `TransformersBackend(..., pack_weights=False)` turns it off.
"""

from __future__ import annotations

import contextlib

import torch

ROWS_HINT = 32  # the batch rows oneDNN picks the packed layout for (16-64 alike, docs/results/benchmarks.md#machine-notes)


def can_pack(model) -> bool:
    """True if `model` is on the CPU with bf16 weights and oneDNN runs bf16 natively here."""
    param = next(model.parameters(), None)
    return (
        param is not None
        and param.device.type == "cpu"
        and param.dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def _packed_forward(module: torch.nn.Linear, entry: list):
    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            return torch.nn.functional.linear(x, module.weight, module.bias)
        return torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), entry[2], module.bias, "none", [], ""
        )

    return forward


def _stamp(w: torch.Tensor) -> tuple | None:
    """What changes when `w` is written or replaced; None for an inference tensor (no version counter)."""
    return None if w.is_inference() else (id(w), w.data_ptr(), w._version)


def _entry(cache: dict, module: torch.nn.Linear) -> list:
    """[stamp, weight, packed weight] for `module`, repacked if its weight was replaced or written."""
    w = module.weight
    stamp, entry = _stamp(w), cache.get(module)
    if entry is None or stamp is None or entry[0] != stamp or entry[1] is not w:
        with torch.no_grad():
            entry = [stamp, w, torch.ops.mkldnn._reorder_linear_weight(w.detach(), ROWS_HINT)]
        cache[module] = entry
    return entry


@contextlib.contextmanager
def packed_linears(model, cache: dict, enabled: bool = True):
    """Run the bf16 linears of a CPU `model` on prepacked weights inside the block (no-op if it
    can't); yields whether it packed. `cache` keeps the packed weights from one block to the next."""
    if not enabled or not can_pack(model):
        yield False
        return
    patched = []
    try:
        for module in model.modules():
            if (
                type(module) is torch.nn.Linear
                and module.weight.dtype == torch.bfloat16
                and module.weight.dim() == 2
            ):
                module.forward = _packed_forward(module, _entry(cache, module))
                patched.append(module)
        yield True
    finally:
        for module in patched:
            del module.forward
