"""The memory plan: a training config's peak device memory, predicted before anything loads.

`arena train CONFIG --plan [--device-memory GIB]` prints it (`plan_config`, `render`). Every
row is a pure function of the config and the model's shape (`agents.models.model_config`:
no weights are read, the parameters are counted on the meta device):

- resident, for the whole run: the weights the passes run on (the bf16 compute copy, or the
  fp32 weights themselves in fp32), the fp32 master weights and the AdamW state (2 fp32
  values a trainable weight) unless `learner.offload_optimizer` keeps them in host memory,
  the frozen KL reference (a full fine-tune with `loss.kl_coef > 0`; with LoRA the base
  with its adapters off is the reference, no copy), the league's opponent model, the vLLM
  engine's share (`backend_kwargs.gpu_memory_utilization` of the card: its weights and KV
  cache) and the CUDA runtime (context, library workspaces);
- then the largest of three phases, which never overlap:
  backward: the compute copy's gradients and one micro-batch's activations (`activation_bytes`);
  optimizer: the fp32 gradients the masters step on (on the device unless offloaded);
  rollout (transformers backend): the KV cache of `concurrency` live matches.

A micro-batch is `learner.micro_batch_tokens` padded tokens, or one longer sequence on its
own (the learner never splits a sequence): with vLLM `backend_kwargs.max_model_len` bounds
it. The LM head runs on completion positions only; at most `agent.max_new_tokens` of every
row's tokens, after a prompt of at least `MIN_PROMPT` tokens.

The activation model counts what autograd keeps per token and layer, measured on the
transformers Llama and Qwen3 layers with sdpa attention (the masked path: key and value
heads repeated to the query heads), and what the learner's fp32 log-softmax over the
vocabulary holds per completion position: `ACTIVATION_*` below. `bench/gpu_check.py`
prints this prediction beside `torch.cuda.max_memory_allocated` for three model shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agents.models import model_config
from core.machine import compute_dtype
from training.config import LeagueConfig
from training.learner_config import LearnerConfig
from training.sections import PolicyModel

GIB = 2**30
MIN_PROMPT = 64  # tokens: the shortest prompt a training row has (a system prompt and a board)
ROLLOUT_PROMPT = 1024  # tokens a transformers rollout's prompt is planned at (rules and history)
CUDA_RUNTIME = 1 * GIB  # CUDA context, cuBLAS/cuDNN workspaces, the allocator's rounding
# Bytes autograd keeps per token and decoder layer, in units of the layer's widths (h hidden,
# q = heads x head_dim, kv = key/value heads x head_dim, f the MLP's), measured with
# torch.autograd.graph.saved_tensors_hooks on transformers' Llama and Qwen3 layers (bf16, sdpa):
# in the compute dtype 4f (gate, up, their SiLU and product) + 4q (query, repeated key and
# value, attention output) + 4.25h (the norms' outputs, the residual inputs) + q + kv (Qwen3's
# q/k norms), in fp32 2h (the RMSNorms' inputs) + q + kv (Qwen3's q/k norms' inputs).
ACTIVATION_COMPUTE = {"ffn": 4.0, "q": 4.0, "hidden": 4.25, "qk_norm": 1.0}
ACTIVATION_FP32 = {"hidden": 2.0, "qk_norm": 1.0}
# Bytes a completion position holds per vocabulary entry at the peak of a bf16 learner step:
# the logits, their fp32 copy scaled by the temperature (kept for the backward), and the
# gradient temporaries of the log-probabilities (measured: 20.5, a step's peak allocation on
# the CPU over 64 against 256 completion positions, with and without entropy and KL terms).
ACTIVATION_HEAD = 20.5


@dataclass
class Row:
    """One line of the plan: what takes memory, how much, where and when."""

    what: str
    bytes: float
    phase: str = "resident"
    """resident (the whole run), or one of the phases that never overlap: backward, optimizer, rollout"""
    where: str = "device"
    """device, or host (CPU memory: offloaded optimizer state, league snapshots)"""
    note: str = ""


@dataclass
class MemoryPlan:
    """A config's predicted memory: its rows, the device's size and the peak."""

    rows: list[Row]
    device_bytes: float
    device_name: str
    notes: list[str] = field(default_factory=list)

    def phase_bytes(self, phase: str, where: str = "device") -> float:
        return sum(r.bytes for r in self.rows if r.phase == phase and r.where == where)

    @property
    def peak(self) -> float:
        """Resident bytes plus the largest phase, on the device."""
        return self.phase_bytes("resident") + max(
            self.phase_bytes(p) for p in ("backward", "optimizer", "rollout")
        )

    @property
    def learner_peak(self) -> float:
        """The learner's own tensors at its peak (what `torch.cuda.max_memory_allocated` counts
        in a process holding only the learner): no engine, runtime or rollout rows."""
        own = [r for r in self.rows if r.where == "device" and r.what not in _NOT_LEARNER]
        resident = sum(r.bytes for r in own if r.phase == "resident")
        return resident + max(
            sum(r.bytes for r in own if r.phase == p) for p in ("backward", "optimizer")
        )

    @property
    def host(self) -> float:
        return sum(r.bytes for r in self.rows if r.where == "host")

    @property
    def fits(self) -> bool:
        return self.peak <= self.device_bytes


ENGINE = "vLLM engine (weights + KV cache)"
RUNTIME = "CUDA runtime (context, workspaces)"
OPPONENTS = "league opponents' model"
_NOT_LEARNER = (ENGINE, RUNTIME, OPPONENTS)


def parameter_count(config) -> int:
    """All parameters of a model built from `config` (counted on the meta device: no memory).

    Args:
        config: a transformers model config.

    Returns:
        The number of parameters (tied embeddings once).
    """
    import torch  # start-up time: torch
    from transformers import AutoModelForCausalLM  # start-up time: transformers

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def lora_parameter_count(config, rank: int, targets: str | list[str] = "all-linear") -> int:
    """Trainable parameters of LoRA adapters of `rank` on a model built from `config`:
    rank x (in + out) per adapted Linear (peft's A and B), "all-linear" meaning every Linear
    but the LM head, a list meaning the Linears whose name ends with one of its entries.

    Args:
        config: a transformers model config.
        rank: the LoRA rank.
        targets: peft's `target_modules`.

    Returns:
        The number of adapter parameters.
    """
    import torch  # start-up time: torch
    from transformers import AutoModelForCausalLM  # start-up time: transformers

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    names = [targets] if isinstance(targets, str) and targets != "all-linear" else targets
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        if names == "all-linear" or any(
            name == t or name.endswith(f".{t}")
            for t in names  # type: ignore[union-attr]
        ):
            total += rank * (module.in_features + module.out_features)
    return total


def _widths(config) -> dict[str, int]:
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return {
        "hidden": config.hidden_size,
        "q": heads * head_dim,
        "kv": kv_heads * head_dim,
        "ffn": config.intermediate_size,
        "layers": config.num_hidden_layers,
        "vocab": config.vocab_size,
        "qk_norm": int(getattr(config, "model_type", "") in ("qwen3", "qwen3_moe")),
    }


def layer_activation_bytes(config, dtype_bytes: int = 2) -> float:
    """Bytes autograd keeps per token for one decoder layer (`ACTIVATION_COMPUTE`, `ACTIVATION_FP32`).

    Args:
        config: a transformers model config (Llama or Qwen3 layers).
        dtype_bytes: bytes per value of the compute dtype (2 bf16, 4 fp32).

    Returns:
        Bytes per token.
    """
    w = _widths(config)
    qk = w["qk_norm"] * (w["q"] + w["kv"])
    compute = (
        ACTIVATION_COMPUTE["ffn"] * w["ffn"]
        + ACTIVATION_COMPUTE["q"] * w["q"]
        + ACTIVATION_COMPUTE["hidden"] * w["hidden"]
        + ACTIVATION_COMPUTE["qk_norm"] * qk
    )
    fp32 = ACTIVATION_FP32["hidden"] * w["hidden"] + ACTIVATION_FP32["qk_norm"] * qk
    return dtype_bytes * compute + 4 * fp32


def activation_bytes(
    config,
    tokens: int,
    completion_positions: int,
    row_tokens: int,
    dtype_bytes: int = 2,
    checkpointing: bool = False,
) -> float:
    """Peak activation memory of one learner micro-batch (forward and backward).

    Args:
        config: a transformers model config.
        tokens: padded tokens in the micro-batch (rows x their common width).
        completion_positions: positions the LM head runs on (rows x the longest completion).
        row_tokens: the micro-batch's width (its longest row): the attention mask is tokens x
            row_tokens, boolean and as an additive copy in the compute dtype.
        dtype_bytes: bytes per value of the compute dtype.
        checkpointing: gradient checkpointing (`learner.gradient_checkpointing`): every layer
            keeps only its input, and one layer at a time is recomputed in the backward.

    Returns:
        Bytes.
    """
    w = _widths(config)
    per_layer = layer_activation_bytes(config, dtype_bytes)
    if checkpointing:
        body = tokens * (w["layers"] * dtype_bytes * w["hidden"] + per_layer)
    else:
        body = tokens * w["layers"] * per_layer
    final_norm = tokens * (4 + dtype_bytes) * w["hidden"]
    mask = tokens * row_tokens * (1 + dtype_bytes)  # the boolean mask and its additive copy
    head = completion_positions * w["vocab"] * ACTIVATION_HEAD * dtype_bytes / 2
    return body + final_norm + mask + head


def embedding_gradient_bytes(config, dtype_bytes: int = 2) -> float:
    """The backward's last peak, after the activations are gone: a tied embedding's gradient
    arrives twice (from the LM head, then from the embedding lookup as a dense vocabulary x
    hidden tensor) and autograd adds them into a third; two of the three are beyond the
    gradients themselves. Untied embeddings: none.

    Args:
        config: a transformers model config.
        dtype_bytes: bytes per value of the compute dtype.

    Returns:
        Bytes.
    """
    if not getattr(config, "tie_word_embeddings", False):
        return 0.0
    return 2.0 * dtype_bytes * config.vocab_size * config.hidden_size


def micro_batch_shapes(policy: PolicyModel) -> list[tuple[int, int, int]]:
    """The micro-batches the plan sizes activations at, as (tokens, completion positions, row
    tokens): a full micro-batch of short-prompt rows and, when vLLM's `max_model_len` is
    longer, one longest row alone (the learner never splits a sequence)."""
    n = policy.learner.micro_batch_tokens
    new = policy.agent.max_new_tokens
    shapes = [(n, min(n, math.ceil(n * new / (new + MIN_PROMPT))), n)]
    longest = int(policy.backend_kwargs.get("max_model_len", 0) or 0)
    if longest > n:
        shapes.append((longest, min(new, longest), longest))
    return shapes


def learner_rows(
    config, learner: LearnerConfig, dtype: str, shapes: list[tuple[int, int, int]]
) -> list[Row]:
    """The learner's rows: weights, masters, reference, optimizer state, gradients, activations.

    Args:
        config: the model's transformers config.
        learner: the learner's options.
        dtype: the compute dtype its precision resolves to, "bfloat16" or "float32".
        shapes: micro-batches as (tokens, completion positions, row tokens) (`activation_bytes`);
            the one with the most activation memory is planned for.

    Returns:
        The rows, on the device and (offloaded) on the host.
    """
    total = parameter_count(config)
    adapters = (
        lora_parameter_count(config, learner.lora_rank, learner.lora_targets)
        if learner.lora_rank > 0
        else 0
    )
    weights = total + adapters
    trainable = (adapters or total) + (config.hidden_size + 1 if learner.value_coef > 0 else 0)
    c = 2 if dtype == "bfloat16" else 4
    masters = "host" if learner.offload_optimizer else "device"
    copy = c == 2 or learner.offload_optimizer  # the passes run on a copy of the fp32 masters
    count = f"{total / 1e9:.3g}B parameters" + (
        f" + {adapters / 1e6:.3g}M in adapters" if adapters else ""
    )
    rows = []
    if copy:
        rows.append(Row(f"compute copy ({dtype})", c * weights, note=count))
    rows.append(
        Row(
            "fp32 master weights" if copy else "weights (fp32, trained in place)",
            4 * weights,
            where=masters,
            note="" if copy else count,
        )
    )
    if learner.loss.kl_coef > 0:
        rows.append(
            Row(
                "KL reference",
                0 if adapters else c * total,
                note="the base with its adapters off" if adapters else "a frozen copy",
            )
        )
    rows.append(
        Row(
            "AdamW state (fp32 m, v)",
            8 * trainable,
            where=masters,
            note=f"{trainable / 1e9:.3g}B trainable",
        )
    )
    if copy:
        rows.append(Row(f"gradients ({dtype})", c * trainable, phase="backward"))
    rows.append(
        Row(
            "gradients (fp32)",
            4 * trainable,
            phase="optimizer" if copy else "backward",
            where=masters,
        )
    )
    ckpt = learner.gradient_checkpointing
    tokens, positions, width = max(
        shapes, key=lambda s: activation_bytes(config, *s, dtype_bytes=c, checkpointing=ckpt)
    )
    activations = activation_bytes(config, tokens, positions, width, c, ckpt)
    embedding = embedding_gradient_bytes(config, c) if adapters == 0 else 0.0
    note = f"{tokens} tokens, LM head on {positions}" + (", checkpointed" if ckpt else "")
    if embedding > activations:  # the two never coexist: the larger is the backward's peak
        note = "the tied embedding's two gradient temporaries (more than the activations)"
    rows.append(Row("activations", max(activations, embedding), phase="backward", note=note))
    return rows


def plan_config(
    policy: PolicyModel,
    concurrency: int,
    league: LeagueConfig,
    ray_address: str | None = None,
    device_gib: float | None = None,
) -> MemoryPlan:
    """The memory plan of a training run on its device, or on a card of `device_gib` GiB.

    Args:
        policy: the run's policy model and how it runs (`training.sections.PolicyModel`).
        concurrency: matches live at once (the rollout KV cache).
        league: the run's league section (frozen snapshots held as opponents).
        ray_address: the Ray cluster the rollouts run on, if any (their models are not counted).
        device_gib: the device's memory in GiB; None: the CUDA card the policy's device
            names when one is present, else this machine's memory (a CPU run).

    Returns:
        The plan (`render` prints it).
    """
    import torch  # start-up time: torch

    cuda = torch.cuda.is_available()
    on_gpu = (
        device_gib is not None
        or policy.device.startswith("cuda")
        or (policy.device == "auto" and cuda)
    )
    if device_gib is not None:
        device_bytes, name = device_gib * GIB, f"a {device_gib:g} GiB GPU"
    elif on_gpu:
        if not cuda:
            raise ValueError(
                f"device {policy.device}: no CUDA device here; plan for a card with --device-memory GIB"
            )
        index = torch.device(policy.device if policy.device != "auto" else "cuda").index or 0
        props = torch.cuda.get_device_properties(index)
        device_bytes, name = props.total_memory, props.name
    else:
        device_bytes, name = _host_memory(), "this machine's memory (CPU)"
    config = model_config(policy.model)
    dtype = compute_dtype(policy.learner.precision, "cuda" if on_gpu else "cpu")
    rows = learner_rows(config, policy.learner, dtype, micro_batch_shapes(policy))
    c = 2 if dtype == "bfloat16" else 4
    total = parameter_count(config)
    notes = []
    if league.snapshot_every:
        rows.append(Row(OPPONENTS, c * total, note="one frozen copy plays every snapshot"))
        rows.append(
            Row(
                "league snapshots",
                league.max_checkpoints * c * total,
                where="host",
                note=f"up to {league.max_checkpoints} kept",
            )
        )
    if policy.backend == "vllm":
        share = float(policy.backend_kwargs.get("gpu_memory_utilization", 0.9))
        rows.append(Row(ENGINE, share * device_bytes, note=f"gpu_memory_utilization {share:g}"))
    else:
        w = _widths(config)
        context = ROLLOUT_PROMPT + policy.agent.max_new_tokens
        kv = concurrency * context * 2 * w["layers"] * w["kv"] * c
        rows.append(
            Row(
                "rollout KV cache (transformers)",
                kv,
                phase="rollout",
                note=f"{concurrency} live matches x {context} tokens",
            )
        )
    if on_gpu:
        rows.append(Row(RUNTIME, CUDA_RUNTIME, note="estimate"))
    if ray_address:
        notes.append("ray: the rollout workers' models are not counted (they run elsewhere)")
    return MemoryPlan(rows, device_bytes, name, notes)


def _host_memory() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    raise ValueError("cannot read this machine's memory size; give --device-memory GIB")


def render(plan: MemoryPlan, title: str = "") -> str:
    """The plan as a table; its last line `peak NN.N GiB of MM GiB: fits` (or `does not fit`).

    Args:
        plan: a `MemoryPlan`.
        title: a first line (the config and model).

    Returns:
        The text, lines joined.
    """
    lines = [title] if title else []
    width = max(len(r.what) for r in plan.rows)
    lines.append(f"{'':{width}}  {'GiB':>7}  {'phase':<9}  {'where':<6}  note")
    for r in plan.rows:
        lines.append(
            f"{r.what:{width}}  {r.bytes / GIB:7.2f}  {r.phase:<9}  {r.where:<6}  {r.note}"
        )
    resident = plan.phase_bytes("resident") / GIB
    phases = ", ".join(
        f"{p} {plan.phase_bytes(p) / GIB:.1f}" for p in ("backward", "optimizer", "rollout")
    )
    lines.append(
        f"device: resident {resident:.1f} GiB + the largest phase ({phases} GiB); {plan.device_name}"
    )
    if plan.host:
        lines.append(f"host memory: {plan.host / GIB:.1f} GiB (offloaded or kept on the CPU)")
    lines += plan.notes
    verdict = "fits" if plan.fits else "does not fit"
    size = f"{plan.device_bytes / GIB:.1f}".removesuffix(".0")
    lines.append(f"peak {plan.peak / GIB:.1f} GiB of {size} GiB: {verdict}")
    return "\n".join(lines)
