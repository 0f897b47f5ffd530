"""The learner: one model for every role and game, updated on turn-level advantages.

A training example is a `Sequence`: prompt token ids, completion token ids, one advantage,
the behaviour log-probabilities (or None) and, for a turn decoded under legal-move
constraints, the allowed strings. `Learner.step(seqs)` makes one optimizer step over them:

1. micro-batches. With `shared_prefix` (the default on a CPU): sort the sequences by their tokens and
   cut them into micro-batches of at most half `micro_batch_tokens` distinct tokens, laid out on
   the step's prefix tree (`training.prefix_tree`): every token several sequences share (a
   game's rules, a conversation's earlier turns) is computed once, forward and backward,
   each continuation attending to its keys and values; segments several micro-batches
   share (the trunk) are computed once per pass and their gradients carried back at the
   end of the step. The hidden states of the positions that predict completion tokens are
   gathered and the LM head runs on those only. Without it (or on a model the tree does not
   fit: `_shares_prefix`): sort by length and pack into micro-batches of at most
   `micro_batch_tokens` padded tokens; each row is laid out `[pad.. prompt | completion
   ..pad]` so every completion starts at the same column, positions count real tokens only
   (as a left-padded rollout does), and the LM head runs on completion positions only
   (`logits_to_keep`). Both give the same log-probabilities and gradients up to the
   summation order;
2. new log-probabilities are `log_softmax(logits / temperature)` of the taken tokens. On a
   constrained turn the softmax runs over `agents.constrained.allowed_token_ids` at
   each position - the distribution the rollout sampled from;
3. behaviour log-probabilities missing from a sequence are the new ones, detached (exact
   for the first update on freshly sampled data; call `prepare()` first when taking
   several steps on the same data); reference log-probabilities (for the k3 KL) come
   from a frozen copy of the initial model, or from the LoRA base with the adapter off;
4. `training.loss.policy_loss` with the full batch's token/sequence counts, so the
   micro-batch gradients add up to one big-batch gradient; clip the norm; AdamW.

With `loss.magnet_coef > 0` the learner also holds a magnet: a frozen copy of the policy that
`magnet_every` refreshes (`refresh_magnet`); each step adds the exact KL(pi || magnet) over the
allowed tokens of every constrained position (`magnet_kl`; Magnetic Mirror Descent).

With `value_coef > 0` the learner also holds a critic: a linear value head on the final
hidden state of each sequence's last prompt token (the state the move was chosen in),
sharing the policy's body. `values(seqs)` reads it; `step` adds
`value_coef * 0.5 * mean (V - value_target)^2` over the sequences that carry a target
(see the `critic` estimator in `training.advantages`).

Precision (`precision`): "float32", or "bfloat16": a bf16 copy of the model (`policy`) runs
every forward and backward pass, and the optimizer steps fp32 master weights (`model`,
what checkpoints hold) with the bf16 gradients cast up; after each step the masters are
rounded into the copy. "auto" takes bf16 on a GPU and on a CPU whichever multiplies faster
(measured; ~2.3x fp32 with AVX-512 BF16, hundreds of times slower without). Why bf16
weights rather than bf16 autocast over the fp32 module: autocast re-casts every weight on
every call, which made CPU rollouts no faster than fp32 (measured in
bench/rollout_throughput.py), while learner steps were equally fast both ways. The rollout
backend samples from `policy` itself, so the behaviour log-probabilities come from the
same bf16 weights the learner recomputes them with. On a CPU in bf16 the learner's own passes
run `bf16_eager_attention` (torch's CPU sdpa kernel is no faster in bf16 than in fp32); the
rollouts keep the module's attention. A recipe-shaped step (bench/learner_throughput.py
--shape recipe --paths 'learner fp32;learner bf16', one row per sequence) took 1.74-1.79x less
CPU time in bf16 than in fp32, against a 2.23-2.26x matmul ratio.
LoRA (`peft`) when `lora_rank > 0`.

Device memory (`training.memory_plan` predicts it): `offload_optimizer` keeps the fp32 masters,
their gradients and the AdamW state on the CPU (`master_device`) while the passes run on the
device's copy, with the same arithmetic; `gradient_checkpointing` keeps one layer's
activations at a time, recomputing each layer in the backward with the learner's attention.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch

from agents.constrained import allowed_token_ids
from agents.transformers_backend import CPU_SDPA  # prefill goes to sdpa: it takes the tree's masks
from core.machine import compute_dtype
from training.learner_config import LearnerConfig
from training.loss import (
    adapt_entropy_coef,
    floor_coef_at,
    magnet_coef_at,
    policy_loss,
)
from training.prefix_tree import TreeOutput, TreePlan, build_tree, tree_hidden


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
    page faults cost more than the arithmetic on a CPU (SmolLM2's 135M weights: 0.43 s a step
    with one reused scratch, 1.3 s allocating, 0.03 s to round to the nearest; 1 thread)."""
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


@dataclass
class Sequence:
    """One training example: a completion after a prompt, with its advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    logprobs: list[float] | None = None
    """behaviour log-probabilities of completion_ids; None: use the current policy's"""
    allowed: list[str] | None = None
    """the legal moves when decoding was constrained to them"""
    value_target: float | None = None
    """what the value head should predict for the prompt (critic); None: no value loss"""


def sequences_from_samples(
    samples, tokenizer=None, recompute: str = "constrained"
) -> list[Sequence]:
    """`Sequence`s from `training.advantages.TurnSample`s.

    `recompute` says whose recorded behaviour logprobs to drop (then the current policy's
    are used): "missing" (only turns without them), "constrained" (also constrained
    turns: a backend may record the unmasked distribution, which would skew the ratio),
    or "all". A turn without `prompt_token_ids` is re-rendered from its `messages` with
    the tokenizer's chat template. Turns without completion tokens are skipped.
    """
    if recompute not in ("missing", "constrained", "all"):
        raise ValueError(f"recompute must be 'missing', 'constrained' or 'all', got {recompute!r}")
    out = []
    for s in samples:
        t = s.turn
        if not t.token_ids:
            continue
        prompt = list(t.prompt_token_ids)
        if not prompt:
            if not t.messages or tokenizer is None:
                raise ValueError(
                    f"turn {s.turn_index} of match {s.match_index} has no prompt_token_ids and no messages to render"
                )
            prompt = render_prompt(tokenizer, t.messages)
        logprobs = list(t.logprobs) if t.logprobs else None
        if logprobs is not None and len(logprobs) != len(t.token_ids):
            raise ValueError(
                f"turn {s.turn_index} of match {s.match_index}: {len(logprobs)} logprobs for {len(t.token_ids)} tokens"
            )
        if recompute == "all" or (recompute == "constrained" and t.constrained):
            logprobs = None
        out.append(
            Sequence(
                prompt,
                list(t.token_ids),
                float(s.advantage),
                logprobs,
                list(t.legal_moves) if t.constrained else None,
                getattr(s, "value_target", None),
            )
        )
    return out


def render_prompt(tokenizer, messages) -> list[int]:
    """The token ids of a chat prompt as the policy sees it (the chat template, generation prompt added).

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        messages: the chat messages ({"role", "content"} dicts).

    Returns:
        The prompt's token ids.
    """
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(ids)


@dataclass
class _Micro:
    """One padded micro-batch: a row per sequence (`input_ids` ...), or a prefix tree (`plan`)."""

    input_ids: torch.Tensor | None  # (B, P + C - 1)
    attention_mask: torch.Tensor | None  # (B, P + C - 1)
    position_ids: torch.Tensor | None  # (B, P + C - 1)
    targets: torch.Tensor  # (B, C) completion tokens (pad beyond each length)
    mask: torch.Tensor  # (B, C) 1 on completion tokens
    advantages: torch.Tensor  # (B,)
    value_targets: torch.Tensor  # (B,) (0 where missing)
    has_value: torch.Tensor  # (B,) bool: a value target is given
    old_logp: torch.Tensor  # (B, C) behaviour logprobs (0 where missing)
    has_old: torch.Tensor  # (B,) bool: behaviour logprobs recorded
    constrained: list[tuple[int, int, list[int]]]  # (row, position, allowed ids)
    index: list[int]  # rows -> positions in the caller's list
    plan: TreePlan | None = None  # the shared-prefix layout (then input_ids etc. are None)
    hidden_index: torch.Tensor | None = None  # (B, C) where each scored position is in the plan
    trunk: _Trunk | None = None  # the segments this micro-batch shares with others (plan.outer)


@dataclass
class _Trunk:
    """The prefix-tree segments several micro-batches of a step share: computed once per pass
    (`Learner._trunk`), each micro-batch attending to `state`."""

    plan: TreePlan
    state: TreeOutput | None = None  # during a pass: its output (leaves of the pass's graph)


def _allowed_index(constrained: list[tuple[int, int, list[int]]], device):
    """(rows, cols, idx, valid) of constrained positions: idx (N, K) the allowed token ids,
    right-padded with 0 where `valid` is False."""
    rows = torch.tensor([r for r, _, _ in constrained], device=device)
    cols = torch.tensor([c for _, c, _ in constrained], device=device)
    K = max(len(a) for _, _, a in constrained)
    idx = torch.zeros((len(constrained), K), dtype=torch.long)
    valid = torch.zeros((len(constrained), K), dtype=torch.bool)
    for n, (_, _, a) in enumerate(constrained):
        idx[n, : len(a)] = torch.tensor(a)
        valid[n, : len(a)] = True
    return rows, cols, idx.to(device), valid.to(device)


def _masked_entropy(sub: torch.Tensor, sub_lse: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Entropy per row of the distribution over the allowed tokens: sub (N, K) logits, -inf
    where `valid` is False; sub_lse (N,) their logsumexp."""
    p = torch.softmax(sub, dim=-1)
    return sub_lse - (p * sub.masked_fill(~valid, 0.0)).sum(-1)


def _uniform_kl(sub: torch.Tensor, sub_lse: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """KL(uniform || p) per row over the allowed tokens (`_masked_entropy`'s arguments): 0 for a
    uniform p, growing without bound as any allowed token's probability goes to 0."""
    logp = (sub - sub_lse[:, None]).masked_fill(~valid, 0.0)
    k = valid.sum(-1).clamp(min=1)
    return -logp.sum(-1) / k - torch.log(k.to(sub.dtype))


def _allowed_logdist(sub: torch.Tensor, sub_lse: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the allowed tokens per row (`_masked_entropy`'s arguments), 0 where
    `valid` is False."""
    return (sub - sub_lse[:, None]).masked_fill(~valid, 0.0)


def magnet_kl(logq: torch.Tensor, logm: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """KL(pi || magnet) per row over the allowed tokens: sum_k pi_k (log pi_k - log m_k).

    Args:
        logq: (N, K) the policy's log-probabilities over the allowed tokens (0 where not valid).
        logm: (N, K) the magnet's, at the same positions and tokens.
        valid: (N, K) which of the K columns are allowed tokens.

    Returns:
        (N,) the exact KL of each row's distribution to the magnet's (0 for one allowed token).
    """
    p = logq.exp() * valid
    return (p * (logq - logm)).sum(-1)


def _plain_lm_head(model) -> bool:
    """The logits are exactly `get_output_embeddings()(last hidden state)`: a Linear head,
    no soft-capping or logit scale (then `_constrained_logprobs` may slice the head)."""
    try:
        head = model.get_output_embeddings()
        model.get_decoder()
    except (AttributeError, NotImplementedError):
        return False
    cfg = getattr(model, "config", None)
    return (
        isinstance(head, torch.nn.Linear)
        and getattr(cfg, "final_logit_softcapping", None) is None
        and getattr(cfg, "logit_scale", None) is None
        and getattr(cfg, "logits_scaling", None) is None
    )


BF16_ATTENTION = "learner_bf16_eager"
SHARED_ATTENTION = (
    "sdpa",
    CPU_SDPA,
    "eager",
    BF16_ATTENTION,
)  # take the 4D masks of `training.prefix_tree`
SHARED_MIN_TOKENS = 32  # share a prefix-tree segment when that saves this many token passes
SHARED_BUCKET_COST = 32  # one more padded pass over a tree depth, counted in token passes
# A prefix tree's micro-batch computes at most this share of `micro_batch_tokens` (trunk
# included). Its rows are whole segments with no padding, each attending to its whole past, so
# at the full budget it held more than the largest padded micro-batch one row per sequence
# makes of the same sequences (bench/learner_throughput.py --shape multi_turn, bf16: peak RSS
# 10,147 against 9,182 MiB). At half: 6,590 against 9,156 MiB (recipe shape 6,391 against
# 10,664), no slower; the tree computes 1% fewer tokens on the recipe shape, 3% more on
# multi_turn.
SHARED_BUDGET_SHARE = 0.5


def _shares_prefix(model, attention: str | None) -> bool:
    """`model` can run a prefix tree (`training.prefix_tree`): a plain LM head, an attention that
    takes a custom 4D mask, and no sliding-window layers (the tree's past is not windowed)."""
    config = getattr(model, "config", None)
    if config is None or not _plain_lm_head(model):
        return False
    layer_types = getattr(config, "layer_types", None) or []
    sliding = any(t != "full_attention" for t in layer_types) or (
        getattr(config, "sliding_window", None) is not None
        and getattr(config, "use_sliding_window", True)
    )
    return not sliding and (attention or config._attn_implementation) in SHARED_ATTENTION


def _mask_kind(model) -> str:
    """The 4D mask `model`'s attention takes in a prefix tree: boolean for sdpa, else additive."""
    return "bool" if model.config._attn_implementation in ("sdpa", CPU_SDPA) else "additive"


def _token_groups(
    order: list[int], fed: list[list[int]], budget: int, trunk: dict[int, int] | None = None
) -> list[list[int]]:
    """`order` (sequences sorted by their tokens) cut into runs that compute at most `budget`
    tokens each: a sequence adds its tokens past the prefix it shares with the one before in
    its run, or past its part in the `trunk` (sequence -> its tokens there, computed once for
    every run). A run is cut where the least would be computed twice (between two games
    rather than inside one conversation), once it holds half the budget. A run may hold as
    many tokens as its longest sequence (a conversation longer than the budget, whose last
    turn a pass without sharing would hold in one row too)."""
    trunk = trunk or {}
    n = len(order)
    lcp = [0] + [_common_prefix(fed[order[k - 1]], fed[order[k]]) for k in range(1, n)]

    def cost(k: int, first: bool) -> int:
        i = order[k]
        return len(fed[i]) - (trunk.get(i, 0) if first else max(lcp[k], trunk.get(i, 0)))

    def twice(j: int) -> int:  # computed in both runs when one ends before j
        return max(0, lcp[j] - trunk.get(order[j], 0))

    groups, start, total, k = [], 0, 0, 0
    while k < n:
        c = cost(k, k == start)
        if k > start and total + c > max(budget, cost(k, True)):
            cuts, filled = [k], 0
            for j in range(start + 1, k):  # cut before j: [start, j) is a run
                filled += cost(j - 1, j - 1 == start)
                if filled >= budget // 2:
                    cuts.append(j)
            best = min(cuts, key=lambda j: (twice(j), -j))
            groups.append(order[start:best])
            start = k = best
            total = 0
            continue
        total += c
        k += 1
    if start < n:
        groups.append(order[start:])
    return groups


def _shared_segments(tree, groups: list[list[int]]) -> list[int]:
    """The segments of `tree` on the paths of more than one group, parents first."""
    users: dict[int, set[int]] = {}
    for g, seqs in enumerate(groups):
        for i in seqs:
            for k in tree.path(i):
                users.setdefault(k, set()).add(g)
    return sorted(k for k, gs in users.items() if len(gs) > 1)


def _common_prefix(a: list[int], b: list[int]) -> int:
    """The number of leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def bf16_eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention with the softmax in the compute dtype (no fp32 copy of
    the scores), the scale applied to the queries and the mask added in place. On a CPU in
    bf16 its matmuls run at bf16 speed: forward + backward ~1.4-1.9x faster than torch's CPU
    flash kernel (sdpa), which is no faster in bf16 than in fp32 and held ~30% of a bf16
    learner step (bench/learner_throughput.py)."""
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


class Learner:
    """Holds the policy, its optimizer and the frozen reference; see the module docstring."""

    def __init__(self, model, tokenizer, cfg: LearnerConfig | None = None, device=None):
        """`model` becomes the fp32 master weights; the passes run on `device` (default: the
        model's), on a copy when the compute dtype is bf16 or the masters are offloaded."""
        self.cfg = cfg or LearnerConfig()
        self.tokenizer = tokenizer
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.device = (
            torch.device(device) if device is not None else next(model.parameters()).device
        )
        # where the masters, their gradients and the optimizer state live
        self.master_device = torch.device("cpu") if self.cfg.offload_optimizer else self.device
        self.compute_dtype = compute_dtype(self.cfg.precision, self.device.type)
        model.to(device=self.master_device, dtype=torch.float32)  # the master weights
        if self.cfg.lora_rank > 0:
            from peft import LoraConfig, get_peft_model  # start-up time: peft (LoRA only)

            lora = LoraConfig(
                r=self.cfg.lora_rank,
                lora_alpha=self.cfg.lora_alpha,
                lora_dropout=self.cfg.lora_dropout,
                target_modules=self.cfg.lora_targets,
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, lora)
        self.model = model
        self.policy = model  # what computes: the master module itself, or its bf16 copy
        self._rounding_scratch: torch.Tensor | None = (
            None  # stochastic rounding's random bits, reused every step
        )
        if self.compute_dtype != "float32" or self.master_device != self.device:
            self.policy = copy.deepcopy(model).to(
                device=self.device, dtype=getattr(torch, self.compute_dtype)
            )
        if self.cfg.gradient_checkpointing:  # active in train mode only: rollouts keep their cache
            self.policy.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        # the learner's own forward passes (not the rollouts that share `policy`)
        self.attention = (
            register_bf16_attention()
            if self.compute_dtype == "bfloat16" and self.device.type == "cpu"
            else None
        )
        wanted = self.cfg.shared_prefix
        if wanted == "auto":  # faster on a CPU, slower on a GPU (docs/results/gpu.md)
            wanted = self.device.type == "cpu"
        self.shared_prefix = bool(wanted) and _shares_prefix(self.policy, self.attention)
        self.ref_model = None
        if self.cfg.loss.kl_coef > 0 and self.cfg.lora_rank == 0:
            self.ref_model = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.magnet = None  # Magnetic Mirror Descent's magnet (loss.magnet_coef, magnet_every)
        if self.cfg.loss.magnet_coef > 0:
            self.magnet = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.value_head = None
        if self.cfg.value_coef > 0:
            self.value_head = torch.nn.Linear(model.config.hidden_size, 1).to(self.device)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        params = self.parameters()
        # fused: one kernel over all tensors; on CPU 8x faster than the default per-tensor loop,
        # which dominated a tiny model's step (its 6M-entry embedding)
        self.optimizer = torch.optim.AdamW(
            params,
            lr=self.cfg.lr,
            betas=self.cfg.betas,
            weight_decay=self.cfg.weight_decay,
            fused=self.device.type in ("cpu", "cuda"),
        )
        self.step_count = 0
        self.entropy_coef = (
            self.cfg.loss.entropy_coef
        )  # moves each step when loss.entropy_target > 0

    def parameters(self) -> list[torch.nn.Parameter]:
        """What the optimizer trains: the policy's trainable weights, then the value head's."""
        head = list(self.value_head.parameters()) if self.value_head is not None else []
        return [p for p in self.model.parameters() if p.requires_grad] + head

    def _pairs(self) -> list[tuple[torch.nn.Parameter, torch.nn.Parameter]]:
        """(master, policy copy) of every trainable weight; empty when they are one module."""
        if self.policy is self.model:
            return []
        trainable = lambda m: [p for p in m.parameters() if p.requires_grad]  # noqa: E731
        return list(zip(trainable(self.model), trainable(self.policy), strict=True))

    @torch.no_grad()
    def sync_policy(self) -> None:
        """Round the master weights into the bf16 policy copy (after a checkpoint load): what
        the copy held after the step the masters come from, stochastic rounding included."""
        if self.policy is not self.model:
            copies = self.policy.state_dict()
            for name, tensor in self.model.state_dict().items():
                copies[name].copy_(tensor)
            self._round_masters_into_policy()

    @torch.no_grad()
    def _round_masters_into_policy(self) -> None:
        """The trainable masters into the policy copy: to the nearest bf16, or stochastically
        (`bf16_rounding`), from a generator seeded by the step count so a resumed run rounds alike."""
        pairs = self._pairs()
        if self.cfg.bf16_rounding == "nearest" or not pairs:
            for master, copied in pairs:
                copied.copy_(master)
            return
        generator = torch.Generator(device=self.master_device).manual_seed(self.step_count)
        largest = max(master.numel() for master, _ in pairs)
        if self._rounding_scratch is None or self._rounding_scratch.numel() < largest:
            self._rounding_scratch = torch.empty(
                largest, dtype=torch.int32, device=self.master_device
            )
        for master, copied in pairs:
            stochastic_round(
                master, copied.dtype, generator, out=copied, scratch=self._rounding_scratch
            )

    # --- batching ---------------------------------------------------------------------

    def _micro_batches(self, seqs: list[Sequence]) -> list[_Micro]:
        if self.shared_prefix:
            return self._tree_batches(seqs)
        order = sorted(
            range(len(seqs)),
            key=lambda i: (len(seqs[i].prompt_ids) + len(seqs[i].completion_ids), i),
            reverse=True,
        )
        groups, cur, P, C = [], [], 0, 0
        for i in order:
            p, c = len(seqs[i].prompt_ids), len(seqs[i].completion_ids)
            nP, nC = max(P, p), max(C, c)
            if cur and (len(cur) + 1) * (nP + nC) > self.cfg.micro_batch_tokens:
                groups.append(cur)
                cur, nP, nC = [], p, c
            cur.append(i)
            P, C = nP, nC
        if cur:
            groups.append(cur)
        return [self._pad([seqs[i] for i in g], g) for g in groups]

    def _tree_batches(self, seqs: list[Sequence]) -> list[_Micro]:
        """Micro-batches of sequences in token order (so those sharing a prefix are together),
        laid out on the step's prefix tree: the segments several micro-batches share (the
        trunk: a game's rules, a conversation's opening) are computed once per pass, and each
        micro-batch computes its own at most `SHARED_BUDGET_SHARE` of `micro_batch_tokens`
        distinct tokens, trunk included, so that a pass holds no more activations than one
        padded row per sequence would."""
        fed = [
            s.prompt_ids + s.completion_ids[:-1] for s in seqs
        ]  # the last token predicts nothing
        order = sorted(range(len(seqs)), key=lambda i: (fed[i], i))
        tree = build_tree(fed, SHARED_MIN_TOKENS)
        budget = max(1, int(self.cfg.micro_batch_tokens * SHARED_BUDGET_SHARE))
        groups = _token_groups(order, fed, budget, None)
        trunk: list[int] = []  # what several runs share, parents first, at most half the budget
        for k in _shared_segments(tree, groups):
            parent = tree.segments[k].parent
            size = len(tree.segments[k].tokens)
            if (parent < 0 or parent in trunk) and sum(
                len(tree.segments[t].tokens) for t in trunk
            ) + size <= budget // 2:
                trunk.append(k)
        if trunk:  # regroup in the room the trunk leaves
            in_trunk = set(trunk)
            part = {
                i: sum(len(tree.segments[k].tokens) for k in tree.path(i) if k in in_trunk)
                for i in order
            }
            room = budget - sum(len(tree.segments[k].tokens) for k in trunk)
            groups = _token_groups(order, fed, room, part)
        dev = self.device
        outer = None
        if trunk:
            plan = TreePlan(tree, self.pad_id, dev, SHARED_BUCKET_COST, segments=trunk)
            outer = _Trunk(plan)
        in_trunk = set(trunk)
        out = []
        for g in groups:
            used = sorted({k for i in g for k in tree.path(i)} - in_trunk)
            plan = TreePlan(
                tree,
                self.pad_id,
                dev,
                SHARED_BUCKET_COST,
                segments=used,
                outer=outer.plan if outer is not None else None,
            )
            out.append(self._pad([seqs[i] for i in g], g, plan, outer))
        return out

    def _pad(
        self,
        rows: list[Sequence],
        index: list[int],
        plan: TreePlan | None = None,
        trunk: _Trunk | None = None,
    ) -> _Micro:
        """The micro-batch of `rows` (`index`: their places in the caller's list): padded rows,
        or the `plan` of a prefix tree over the caller's list (`trunk`: its outer plan's)."""
        P = max(len(s.prompt_ids) for s in rows)
        C = max(len(s.completion_ids) for s in rows)
        B = len(rows)
        ids = torch.full((B, P + C), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, P + C), dtype=torch.long)
        old = torch.zeros((B, C))
        has_old = torch.zeros(B, dtype=torch.bool)
        constrained = []
        for b, s in enumerate(rows):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            ids[b, P - p : P] = torch.tensor(s.prompt_ids)
            ids[b, P : P + c] = torch.tensor(s.completion_ids)
            attn[b, P - p : P + c] = 1
            if s.logprobs is not None:
                old[b, :c] = torch.tensor(s.logprobs)
                has_old[b] = True
            if s.allowed is not None:
                for j in range(c):
                    allowed = allowed_token_ids(self.tokenizer, s.allowed, s.completion_ids[:j])
                    if s.completion_ids[j] not in allowed:
                        raise ValueError(
                            f"constrained completion {self.tokenizer.decode(s.completion_ids)!r} leaves the legal moves at token {j}; "
                            "was it decoded with agents.constrained.allowed_token_ids?"
                        )
                    constrained.append((b, j, allowed))
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        mask = (
            torch.arange(C)[None, :] < torch.tensor([len(s.completion_ids) for s in rows])[:, None]
        ).float()
        dev = self.device
        hidden_index = None
        if plan is not None:
            hidden_index = torch.zeros((B, C), dtype=torch.long)
            for b, (s, i) in enumerate(zip(rows, index)):
                p = len(s.prompt_ids)
                for j in range(len(s.completion_ids)):  # position p - 1 + j predicts token j
                    hidden_index[b, j] = plan.index(i, p - 1 + j)
            hidden_index = hidden_index.to(dev)
        return _Micro(
            input_ids=None if plan else ids[:, :-1].to(dev),  # the last token predicts nothing
            attention_mask=None if plan else attn[:, :-1].to(dev),
            position_ids=None if plan else pos[:, :-1].to(dev),
            targets=ids[:, P:].to(dev),
            mask=mask.to(dev),
            advantages=torch.tensor([s.advantage for s in rows], dtype=torch.float32).to(dev),
            value_targets=torch.tensor(
                [s.value_target or 0.0 for s in rows], dtype=torch.float32
            ).to(dev),
            has_value=torch.tensor([s.value_target is not None for s in rows], dtype=torch.bool).to(
                dev
            ),
            old_logp=old.to(dev),
            has_old=has_old.to(dev),
            constrained=constrained,
            index=index,
            plan=plan,
            hidden_index=hidden_index,
            trunk=trunk,
        )

    # --- log-probabilities ------------------------------------------------------------

    def _logprobs(self, model, mb: _Micro, entropy_mode: str | None, hidden: bool = False):
        """(logp, entropy or None, state or None, floor or None, allowed or None): logp and entropy
        (B, C) under the (possibly masked) sampling distribution; state (B, H) the last prompt
        token's final hidden state; floor (B, C) KL(uniform || pi) on constrained tokens; allowed
        (N, K) the log-distribution over the allowed tokens at each of `mb.constrained`'s positions.

        entropy_mode: None (skip), "metric" (computed without grad) or "grad"."""
        if mb.constrained and len(mb.constrained) == int(mb.mask.sum()) and _plain_lm_head(model):
            return self._constrained_logprobs(model, mb, entropy_mode)
        if mb.plan is not None:  # a plain head (`shared_prefix`): the logits of the gathered states
            last = self._hidden(model, mb)  # (B, C, H)
            state = last[:, 0].float() if hidden else None
            head = model.get_output_embeddings()
            logits = head(last).float() / self.cfg.temperature
        else:
            C, L = mb.targets.shape[1], mb.input_ids.shape[1]
            # the last C positions as an index tensor, not the int C: transformers slices `[:, -C:]`
            # for an int, a strided view the LM head's matmul runs as a batched one, whose weight
            # gradient went through a (B, hidden, vocab) temporary (0.6 s of a 1000-token bf16 step)
            keep = torch.arange(L - C, L, device=mb.input_ids.device)
            with attention_implementation(model, self.attention):
                out = model(
                    input_ids=mb.input_ids,
                    attention_mask=mb.attention_mask,
                    position_ids=mb.position_ids,
                    logits_to_keep=keep,
                    use_cache=False,
                    output_hidden_states=hidden,
                )
            state = (
                out.hidden_states[-1][:, -C].float() if hidden else None
            )  # the final norm is applied
            logits = out.logits.float() / self.cfg.temperature  # (B, C, V)
        lse = torch.logsumexp(logits, dim=-1)  # (B, C)
        taken = logits.gather(-1, mb.targets.unsqueeze(-1)).squeeze(-1)  # (B, C)
        entropy = floor = allowed = None
        if entropy_mode is not None:
            with torch.set_grad_enabled(entropy_mode == "grad" and torch.is_grad_enabled()):
                entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        if mb.constrained:
            rows, cols, idx, valid = _allowed_index(mb.constrained, logits.device)
            sub = logits[rows, cols].gather(-1, idx).masked_fill(~valid, float("-inf"))  # (N, K)
            sub_lse = torch.logsumexp(sub, dim=-1)
            allowed = _allowed_logdist(sub, sub_lse, valid)
            lse = lse.index_put((rows, cols), sub_lse)
            if entropy is not None:
                with torch.set_grad_enabled(entropy.requires_grad):
                    entropy = entropy.index_put((rows, cols), _masked_entropy(sub, sub_lse, valid))
                    floor = (
                        torch.zeros_like(lse).index_put(
                            (rows, cols), _uniform_kl(sub, sub_lse, valid)
                        )
                        * mb.mask
                    )
        logp = (taken - lse) * mb.mask
        if entropy is not None:
            entropy = entropy * mb.mask
            floor = (
                floor if floor is not None else torch.zeros_like(logp)
            )  # free-text turns: no floor
        return logp, entropy, state, floor, allowed

    def _constrained_logprobs(self, model, mb: _Micro, entropy_mode: str | None):
        """`_logprobs` when every completion token was constrained: the LM head runs on the
        allowed tokens' rows of its weight only, never over the whole vocabulary (a tiny
        model's step was mostly a 49k-wide softmax and its backward)."""
        B, C = mb.targets.shape
        hidden = self._hidden(model, mb)
        head = model.get_output_embeddings()
        dev = hidden.device
        rows, cols, idx, valid = _allowed_index(mb.constrained, dev)
        # logits of the allowed tokens: one matmul against the distinct rows of the head, then
        # a gather (indexing the head per (position, token) would make its gradient a
        # scatter-add over duplicates, whose summation order varies run to run)
        uniq, where = torch.unique(idx, return_inverse=True)
        # in the head's dtype, then fp32: the logits round as the full head's do (bf16 policy)
        logits = hidden[rows, cols] @ head.weight[uniq].T  # (N, U)
        if head.bias is not None:
            logits = logits + head.bias[uniq]
        logits = logits.float()
        sub = logits.gather(-1, where)  # (N, K)
        sub = (sub / self.cfg.temperature).masked_fill(~valid, float("-inf"))  # (N, K)
        sub_lse = torch.logsumexp(sub, dim=-1)
        pick = (idx == mb.targets[rows, cols].unsqueeze(-1)) & valid
        taken = sub.masked_fill(~pick, 0.0).sum(-1)
        logp = torch.zeros((B, C), device=dev).index_put((rows, cols), taken - sub_lse)
        allowed = _allowed_logdist(sub, sub_lse, valid)
        entropy = floor = None
        if entropy_mode is not None:
            with torch.set_grad_enabled(entropy_mode == "grad" and torch.is_grad_enabled()):
                h = _masked_entropy(sub, sub_lse, valid)
                entropy = torch.zeros((B, C), device=dev).index_put((rows, cols), h) * mb.mask
                floor = (
                    torch.zeros((B, C), device=dev).index_put(
                        (rows, cols), _uniform_kl(sub, sub_lse, valid)
                    )
                    * mb.mask
                )
        return logp * mb.mask, entropy, hidden[:, 0].float(), floor, allowed

    def _magnet_kl(
        self,
        mb: _Micro,
        allowed: torch.Tensor | None,
        mag: torch.Tensor | None,
        logp: torch.Tensor,
    ):
        """(B, C) KL(pi || magnet) over the allowed tokens at each constrained position (0 elsewhere:
        a free-text token has no move distribution to compare); `mag` from `_magnet_logdists`."""
        out = torch.zeros_like(logp)
        if allowed is None or mag is None:
            return out
        rows, cols, _, valid = _allowed_index(mb.constrained, logp.device)
        return out.index_put((rows, cols), magnet_kl(allowed, mag, valid)) * mb.mask

    @torch.no_grad()
    def _magnet_logdists(self, mbs: list[_Micro]) -> list[torch.Tensor | None]:
        """The magnet's log-distribution over the allowed tokens (N, K) of each micro-batch, from
        its own pass (its own shared trunk), before the policy's."""
        with self._trunk(self.magnet, mbs):
            return [self._logprobs(self.magnet, mb, None)[4] for mb in mbs]

    @torch.no_grad()
    def refresh_magnet(self) -> None:
        """Copy the policy's current weights into the magnet."""
        self.magnet.load_state_dict(self.policy.state_dict())

    def _hidden(self, model, mb: _Micro) -> torch.Tensor:
        """(B, C, H) the final hidden states (the final norm applied) at the positions that
        predict each completion token: the last prompt token's, then the completion's."""
        C = mb.targets.shape[1]
        with attention_implementation(model, self.attention):
            if mb.plan is None:
                return model.get_decoder()(
                    input_ids=mb.input_ids,
                    attention_mask=mb.attention_mask,
                    position_ids=mb.position_ids,
                    use_cache=False,
                ).last_hidden_state[:, -C:]
            kind = _mask_kind(model)
            outer = None
            if mb.trunk is not None:  # computed for the whole pass (`_trunk`), or here
                outer = mb.trunk.state or tree_hidden(
                    model.get_decoder(), mb.trunk.plan, kind, keep_kv=True
                )
            out = tree_hidden(model.get_decoder(), mb.plan, kind, outer=outer)
        return out.hidden[mb.hidden_index]

    @contextlib.contextmanager
    def _trunk(self, model, mbs: list[_Micro], grad: bool = False):
        """Inside the block, the micro-batches of `mbs` read their shared trunk from one pass of
        `model` over it. `grad`: the micro-batches backpropagate into it (each `backward` inside
        the block), and the block's end carries those gradients on through the trunk's pass."""
        trunk = mbs[0].trunk if mbs else None
        if trunk is None:
            yield
            return
        with torch.set_grad_enabled(grad), attention_implementation(model, self.attention):
            out = tree_hidden(model.get_decoder(), trunk.plan, _mask_kind(model), keep_kv=True)
        trunk.state = out.detached() if grad else out
        try:
            yield
            if grad:
                pairs = [
                    (t, leaf.grad)
                    for t, leaf in zip(out.tensors(), trunk.state.tensors())
                    if leaf.grad is not None
                ]
                if pairs:  # with the forward's attention (checkpointed layers recompute)
                    with attention_implementation(model, self.attention):
                        torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        finally:
            trunk.state = None

    @contextlib.contextmanager
    def _reference(self):
        """The reference model inside the block: the frozen copy, or the LoRA base (adapter off)."""
        if self.ref_model is not None:
            yield self.ref_model
            return
        with self.policy.disable_adapter():  # LoRA: the base model is the reference
            yield self.policy

    @torch.no_grad()
    def _ref_logprobs(self, mbs: list[_Micro]) -> list[torch.Tensor]:
        """The reference's log-probabilities (B, C) of each micro-batch."""
        with self._reference() as model, self._trunk(model, mbs):
            return [self._logprobs(model, mb, None)[0] for mb in mbs]

    def completion_logprobs(self, seqs: list[Sequence]) -> Iterator[tuple[torch.Tensor, list[int]]]:
        """The policy's log-probability of each whole completion, micro-batch by micro-batch:
        yields (logp (B,), indices into `seqs`), differentiable when grad is enabled, so a caller
        can backpropagate one micro-batch before the next is built (supervised fits, probes)."""
        for mb in self._micro_batches(seqs):
            yield self._logprobs(self.policy, mb, None)[0].sum(1), mb.index

    @torch.no_grad()
    def logprobs(self, seqs: list[Sequence], reference: bool = False) -> list[list[float]]:
        """Per-token log-probabilities of each completion under the policy (or the reference)."""
        out: list[list[float]] = [[] for _ in seqs]
        mbs = self._micro_batches(seqs)
        if reference:
            lps = self._ref_logprobs(mbs)
        else:
            with self._trunk(self.policy, mbs):
                lps = [self._logprobs(self.policy, mb, None)[0] for mb in mbs]
        for mb, lp in zip(mbs, lps):
            for b, i in enumerate(mb.index):
                out[i] = lp[b, : len(seqs[i].completion_ids)].tolist()
        return out

    @torch.no_grad()
    def values(self, seqs: list[Sequence]) -> list[float]:
        """The value head's estimate for each sequence's prompt."""
        if self.value_head is None:
            raise ValueError("this learner has no value head (set learner.value_coef > 0)")
        out = [0.0] * len(seqs)
        mbs = self._micro_batches(seqs)
        with self._trunk(self.policy, mbs):
            for mb in mbs:
                state = self._logprobs(self.policy, mb, None, hidden=True)[2]
                v = self.value_head(state).squeeze(-1).tolist()
                for b, i in enumerate(mb.index):
                    out[i] = v[b]
        return out

    def computed_spans(self, seqs: list[Sequence]) -> list[tuple[int, int]]:
        """What a pass over `seqs` computes, padding not counted: (position of the first token,
        tokens) of each run of positions computed together. One per sequence (every prompt
        and completion token but the completion's last), or (`shared_prefix`) one per segment
        of the micro-batches' prefix trees, shared tokens once."""
        seqs = [s for s in seqs if s.completion_ids]
        if not self.shared_prefix:
            return [(0, len(s.prompt_ids) + len(s.completion_ids) - 1) for s in seqs]
        mbs = self._micro_batches(seqs)
        trunk = mbs[0].trunk.plan.spans() if mbs and mbs[0].trunk else []
        return trunk + [span for mb in mbs for span in mb.plan.spans()]

    def computed_tokens(self, seqs: list[Sequence]) -> int:
        """The token positions a pass over `seqs` computes (`computed_spans`)."""
        return sum(n for _, n in self.computed_spans(seqs))

    def prepare(self, seqs: list[Sequence]) -> None:
        """Fill missing behaviour logprobs from the current policy (before several steps on one batch)."""
        missing = [s for s in seqs if s.logprobs is None]
        for s, lp in zip(missing, self.logprobs(missing) if missing else []):
            s.logprobs = lp

    # --- the update -------------------------------------------------------------------

    def lr_at(self, step: int) -> float:
        c = self.cfg
        if c.warmup_steps and step < c.warmup_steps:
            return c.lr * (step + 1) / c.warmup_steps
        if c.lr_schedule == "cosine" and c.total_steps > c.warmup_steps:
            frac = min(1.0, (step - c.warmup_steps) / (c.total_steps - c.warmup_steps))
            return c.lr * (
                c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac))
            )
        return c.lr

    def step(self, seqs: list[Sequence]) -> dict[str, float]:
        """One optimizer step over `seqs`; returns the step's metrics."""
        seqs = [s for s in seqs if s.completion_ids]
        if not seqs:
            raise ValueError("no sequences with completion tokens to train on")
        for s in seqs:
            if s.logprobs is not None and len(s.logprobs) != len(s.completion_ids):
                raise ValueError(
                    f"a sequence has {len(s.logprobs)} logprobs for {len(s.completion_ids)} completion tokens"
                )
        self.policy.train()
        lcfg = replace(
            self.cfg.loss,
            entropy_coef=self.entropy_coef,
            floor_coef=floor_coef_at(self.step_count, self.cfg.loss),
            magnet_coef=magnet_coef_at(self.step_count, self.cfg.loss),
        )
        num_tokens = sum(len(s.completion_ids) for s in seqs)
        num_seqs = len(seqs)
        num_values = (
            sum(s.value_target is not None for s in seqs) if self.value_head is not None else 0
        )
        lr = self.lr_at(self.step_count)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        self.policy.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        ratio_min, ratio_max, loss_total, value_total = math.inf, -math.inf, 0.0, 0.0
        mbs = self._micro_batches(seqs)
        refs = self._ref_logprobs(mbs) if lcfg.kl_coef > 0 else [None] * len(mbs)
        magnets = self._magnet_logdists(mbs) if lcfg.magnet_coef > 0 else [None] * len(mbs)
        with self._trunk(self.policy, mbs, grad=True):  # its backward at the block's end
            for mb, ref, mag in zip(mbs, refs, magnets):
                want = (
                    "grad"
                    if lcfg.entropy_coef > 0 or lcfg.floor_coef > 0
                    else "metric"
                    if self.cfg.log_entropy or lcfg.entropy_target > 0
                    else None
                )
                logp, entropy, state, floor, allowed = self._logprobs(
                    self.policy, mb, want, hidden=num_values > 0
                )
                to_magnet = None
                if lcfg.magnet_coef > 0:
                    to_magnet = self._magnet_kl(mb, allowed, mag, logp)
                old = torch.where(mb.has_old[:, None], mb.old_logp, logp.detach())
                loss, m = policy_loss(
                    logp,
                    old,
                    mb.advantages,
                    mb.mask,
                    lcfg,
                    ref_logp=ref,
                    entropy=entropy,
                    num_tokens=num_tokens,
                    num_seqs=num_seqs,
                    floor=floor,
                    magnet=to_magnet,
                )
                if num_values:
                    err = (self.value_head(state).squeeze(-1) - mb.value_targets) * mb.has_value
                    value_loss = 0.5 * (err**2).sum() / num_values
                    loss = loss + self.cfg.value_coef * value_loss
                    value_total += float(
                        value_loss.detach()
                    )  # each micro-batch's share of the batch's value loss
                # gradient checkpointing recomputes layers in the backward: with the forward's
                # attention
                with attention_implementation(self.policy, self.attention):
                    loss.backward()
                loss_total += float(loss.detach())
                n = m.pop("tokens")
                ratio_min, ratio_max = (
                    min(ratio_min, m.pop("ratio_min")),
                    max(ratio_max, m.pop("ratio_max")),
                )
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + v * n
        for master, copied in self._pairs():  # bf16 gradients onto the fp32 masters
            master.grad = (
                None
                if copied.grad is None
                else copied.grad.to(device=master.device, dtype=torch.float32)
            )
            copied.grad = None
        params = self.parameters()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            params, self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        )
        self.optimizer.step()
        self.step_count += 1
        self._round_masters_into_policy()
        if (
            self.magnet is not None
            and self.cfg.magnet_every
            and self.step_count % self.cfg.magnet_every == 0
        ):
            self.refresh_magnet()
        metrics = {k: v / num_tokens for k, v in sums.items()}
        if num_values:
            metrics["value_loss"] = value_total
        metrics.update(
            loss=loss_total,
            grad_norm=float(grad_norm),
            lr=lr,
            ratio_min=ratio_min,
            ratio_max=ratio_max,
            tokens=float(num_tokens),
            sequences=float(num_seqs),
        )
        if self.cfg.loss.floor_decay_steps > 0:
            metrics["floor_coef"] = lcfg.floor_coef
        if self.cfg.loss.magnet_decay_steps > 0:
            metrics["magnet_coef"] = lcfg.magnet_coef
        if lcfg.entropy_target > 0:
            metrics["entropy_coef"] = self.entropy_coef
            self.entropy_coef = adapt_entropy_coef(self.entropy_coef, metrics["entropy"], lcfg)
        return metrics

    # --- weights out ------------------------------------------------------------------

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights under the base model's names (LoRA merged in), for weight sync."""
        if self.cfg.lora_rank == 0:
            return {k: v.detach() for k, v in self.model.state_dict().items()}
        # W + delta computed aside: merge_adapter/unmerge_adapter would leave rounding drift in W
        base = self.model.get_base_model()
        sd = {
            k.replace(".base_layer.", "."): v.detach()
            for k, v in base.state_dict().items()
            if "lora_" not in k
        }
        with torch.no_grad():
            for name, module in base.named_modules():
                if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                    delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
                    sd[f"{name}.weight"] = module.base_layer.weight.detach() + delta
        return sd
