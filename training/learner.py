"""The learner: one model for every role and game, updated on turn-level advantages.

`Learner.step(seqs)` makes one optimizer step over a list of `training.sequences.TrainingSequence`:

1. forward: the sequences cut into micro-batches (`training.sequences.micro_batches`: prefix
   trees that compute each shared token once, or padded rows) and their new log-probabilities
   (`training.logprobs`): `log_softmax(logits / temperature)` of the taken tokens, on a
   constrained turn over `agents.constrained.allowed_token_ids` at each position - the
   distribution the rollout sampled from;
2. loss: behaviour log-probabilities missing from a sequence are the new ones, detached (exact
   for the first update on freshly sampled data; call `prepare()` first when taking
   several steps on the same data); reference log-probabilities (for the k3 KL) come
   from a frozen copy of the initial model, or from the LoRA base with the adapter off;
   `training.loss.policy_loss` with the full batch's token/sequence counts, so the
   micro-batch gradients add up to one big-batch gradient;
3. optimizer step: clip the norm; AdamW on the fp32 master weights (`training.precision`).

With `loss.magnet_coef > 0` the learner also holds a magnet: a frozen copy of the policy that
`magnet_every` refreshes (`refresh_magnet`); each step adds the exact KL(pi || magnet) over the
allowed tokens of every constrained position (`training.logprobs.magnet_kl`; Magnetic Mirror
Descent).

With `value_coef > 0` the learner also holds a critic: a linear value head on the final
hidden state of each sequence's last prompt token (the state the move was chosen in),
sharing the policy's body. `values(seqs)` reads it; `step` adds
`value_coef * 0.5 * mean (V - value_target)^2` over the sequences that carry a target
(see the `critic` estimator in `training.advantages`).

Precision (`precision`: float32, or a bf16 copy of fp32 masters) and the learner's own bf16
attention on a CPU: `training.precision`. LoRA (`peft`) when `lora_rank > 0`.

Per-role policies (`roles`): one LoRA adapter per role on the shared frozen base. A step
groups its sequences by `TrainingSequence.role` and runs each group with its role's adapter
active, its loss normalised by the group's own counts; each adapter's gradient is clipped
alone. So an adapter's gradient comes only from its role's turns, and a role's step is the
one a learner of that role alone would take.

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
from dataclasses import dataclass, field, replace

import torch
from torch.nn.utils import clip_grad_norm_

from agents.models import adapters_off, lora_model, use_adapter
from core.machine import compute_dtype
from training.learner_config import LearnerConfig
from training.logprobs import magnet_kl_at, micro_logprobs, shared_trunk
from training.loss import (
    LossConfig,
    adapt_entropy_coef,
    floor_coef_at,
    magnet_coef_at,
    policy_loss,
)
from training.precision import (
    attention_implementation,
    grads_to_masters,
    learner_attention,
    round_masters,
    trainable_pairs,
)
from training.sequences import (
    Batching,
    MicroBatch,
    TrainingSequence,
    micro_batches,
    shares_prefix,
)


class Learner:
    """Holds the policy, its optimizer and the frozen reference; see the module docstring."""

    def __init__(
        self,
        model,
        tokenizer,
        cfg: LearnerConfig | None = None,
        device=None,
        roles: tuple[str, ...] = (),
    ):
        """`model` becomes the fp32 master weights; the passes run on `device` (default: the
        model's), on a copy when the compute dtype is bf16 or the masters are offloaded.
        `roles`: one LoRA adapter per role on the shared base (per-role policies; needs
        `lora_rank > 0`); each sequence then trains its own role's adapter only."""
        self.cfg = cfg or LearnerConfig()
        self.roles = tuple(roles)
        if self.roles and self.cfg.lora_rank == 0:
            raise ValueError("learner.lora_rank must be > 0 with roles (one LoRA adapter per role)")
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
            c = self.cfg
            model = lora_model(
                model, c.lora_rank, c.lora_alpha, c.lora_targets, c.lora_dropout, self.roles
            )
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
        self.attention = learner_attention(self.compute_dtype, self.device)
        wanted = self.cfg.shared_prefix
        if wanted == "auto":  # faster on a CPU, slower on a GPU (docs/results/gpu.md)
            wanted = self.device.type == "cpu"
        self.shared_prefix = bool(wanted) and shares_prefix(self.policy, self.attention)
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
        # fused: one kernel over all tensors, on a CPU much faster than the per-tensor loop
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

    @torch.no_grad()
    def sync_policy(self) -> None:
        """Round the master weights into the bf16 policy copy (after a checkpoint load): what
        the copy held after the step the masters come from, stochastic rounding included."""
        if self.policy is not self.model:
            copies = self.policy.state_dict()
            for name, tensor in self.model.state_dict().items():
                copies[name].copy_(tensor)
            self._round_masters_into_policy()

    def _round_masters_into_policy(self) -> None:
        """The trainable masters into the policy copy, to the nearest bf16 or stochastically
        (`bf16_rounding`), from a generator seeded by the step count so a resumed run rounds alike."""
        self._rounding_scratch = round_masters(
            trainable_pairs(self.model, self.policy),
            self.cfg.bf16_rounding,
            self.step_count,
            self.master_device,
            self._rounding_scratch,
        )

    # --- batching ---------------------------------------------------------------------

    def _micro_batches(self, seqs: list[TrainingSequence]) -> list[MicroBatch]:
        """`seqs` cut into micro-batches as this learner lays them out (`training.sequences`)."""
        batching = Batching(
            self.tokenizer,
            self.pad_id,
            self.device,
            self.cfg.micro_batch_tokens,
            self.shared_prefix,
        )
        return micro_batches(seqs, batching)

    # --- log-probabilities ------------------------------------------------------------

    def _logprobs(self, model, mb: MicroBatch, entropy_mode: str | None, hidden: bool = False):
        """`training.logprobs.micro_logprobs` of `model` over `mb`, with this learner's
        attention and temperature."""
        return micro_logprobs(
            model,
            mb,
            entropy_mode,
            attention=self.attention,
            temperature=self.cfg.temperature,
            hidden=hidden,
        )

    @torch.no_grad()
    def _magnet_logdists(self, mbs: list[MicroBatch]) -> list[torch.Tensor | None]:
        """The magnet's log-distribution over the allowed tokens (N, K) of each micro-batch, from
        its own pass (its own shared trunk), before the policy's."""
        with self._trunk(self.magnet, mbs):
            return [self._logprobs(self.magnet, mb, None)[4] for mb in mbs]

    @torch.no_grad()
    def refresh_magnet(self) -> None:
        """Copy the policy's current weights into the magnet."""
        self.magnet.load_state_dict(self.policy.state_dict())

    def _trunk(self, model, mbs: list[MicroBatch], grad: bool = False):
        """`training.logprobs.shared_trunk` of `model` over `mbs`, with this learner's attention:
        inside the block the micro-batches read their shared trunk from one pass over it."""
        return shared_trunk(model, mbs, self.attention, grad)

    @contextlib.contextmanager
    def _reference(self):
        """The reference model inside the block: the frozen copy, or the LoRA base (adapter off)."""
        if self.ref_model is not None:
            yield self.ref_model
            return
        with adapters_off(self.policy):  # LoRA: the base model is the reference
            yield self.policy

    @torch.no_grad()
    def _ref_logprobs(self, mbs: list[MicroBatch]) -> list[torch.Tensor]:
        """The reference's log-probabilities (B, C) of each micro-batch."""
        with self._reference() as model, self._trunk(model, mbs):
            return [self._logprobs(model, mb, None)[0] for mb in mbs]

    def completion_logprobs(
        self, seqs: list[TrainingSequence]
    ) -> Iterator[tuple[torch.Tensor, list[int]]]:
        """The policy's log-probability of each whole completion, micro-batch by micro-batch:
        yields (logp (B,), indices into `seqs`), differentiable when grad is enabled, so a caller
        can backpropagate one micro-batch before the next is built (supervised fits, probes)."""
        for role, idx in self._by_role(seqs):
            self._use(role)
            for mb in self._micro_batches([seqs[i] for i in idx]):
                yield self._logprobs(self.policy, mb, None)[0].sum(1), [idx[i] for i in mb.index]

    @torch.no_grad()
    def logprobs(self, seqs: list[TrainingSequence], reference: bool = False) -> list[list[float]]:
        """Per-token log-probabilities of each completion under the policy (or the reference);
        with roles, each under its own role's adapter."""
        out: list[list[float]] = [[] for _ in seqs]
        for role, idx in self._by_role(seqs):
            self._use(role)
            group = [seqs[i] for i in idx]
            mbs = self._micro_batches(group)
            if reference:
                lps = self._ref_logprobs(mbs)
            else:
                with self._trunk(self.policy, mbs):
                    lps = [self._logprobs(self.policy, mb, None)[0] for mb in mbs]
            for mb, lp in zip(mbs, lps):
                for b, i in enumerate(mb.index):
                    out[idx[i]] = lp[b, : len(group[i].completion_ids)].tolist()
        return out

    @torch.no_grad()
    def values(self, seqs: list[TrainingSequence]) -> list[float]:
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

    # --- roles --------------------------------------------------------------------------

    def _by_role(self, seqs: list[TrainingSequence]) -> list[tuple[str | None, list[int]]]:
        """The indices of `seqs` grouped by role, in the order of `roles` (one group, role None,
        without roles).

        Raises:
            ValueError: with roles, a sequence's role is not one of them.
        """
        if not self.roles:
            return [(None, list(range(len(seqs))))]
        unknown = sorted({str(s.role) for s in seqs if s.role not in self.roles})
        if unknown:
            raise ValueError(
                f"sequences of role {', '.join(unknown)}: this learner trains {', '.join(self.roles)}"
            )
        groups = [(r, [i for i, s in enumerate(seqs) if s.role == r]) for r in self.roles]
        return [(r, idx) for r, idx in groups if idx]

    def _use(self, role: str | None) -> None:
        """The policy (and the magnet) compute with `role`'s adapter from here on (no role: as they are)."""
        if role is not None:
            for model in (self.policy, self.magnet):
                if model is not None:
                    use_adapter(model, role)

    def role_parameters(self, role: str) -> list[torch.nn.Parameter]:
        """The master weights of `role`'s LoRA adapter."""
        return [p for n, p in self.model.named_parameters() if "lora_" in n and f".{role}." in n]

    def computed_spans(self, seqs: list[TrainingSequence]) -> list[tuple[int, int]]:
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

    def computed_tokens(self, seqs: list[TrainingSequence]) -> int:
        """The token positions a pass over `seqs` computes (`computed_spans`)."""
        return sum(n for _, n in self.computed_spans(seqs))

    def prepare(self, seqs: list[TrainingSequence]) -> None:
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

    def step(self, seqs: list[TrainingSequence]) -> dict[str, float]:
        """One optimizer step over `seqs`: forward and loss over each micro-batch, each
        micro-batch's backward adding to one big-batch gradient, then the optimizer step.

        Returns:
            The step's metrics (`training.loss.policy_loss`'s, token-weighted over the
            micro-batches, with the loss, grad_norm, lr, the ratio's range and the batch size).
        """
        seqs = _trainable(seqs)
        self.policy.train()
        lcfg = self._step_loss_config()
        lr = self.lr_at(self.step_count)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        self.policy.zero_grad(set_to_none=True)
        totals = _StepTotals()
        for role, idx in self._by_role(seqs):  # with roles: each role's turns on its adapter
            self._use(role)
            self._accumulate([seqs[i] for i in idx], lcfg, totals)
        grad_norm = self._optimizer_step()
        metrics = _step_metrics(totals, self._batch_size(seqs), lr, grad_norm)
        if self.cfg.loss.floor_decay_steps > 0:
            metrics["floor_coef"] = lcfg.floor_coef
        if self.cfg.loss.magnet_decay_steps > 0:
            metrics["magnet_coef"] = lcfg.magnet_coef
        if lcfg.entropy_target > 0:
            metrics["entropy_coef"] = self.entropy_coef
            self.entropy_coef = adapt_entropy_coef(self.entropy_coef, metrics["entropy"], lcfg)
        return metrics

    def _step_loss_config(self) -> LossConfig:
        """The loss config of this step: the adapted entropy coefficient, the floor's and the
        magnet's coefficients at this step of their schedules."""
        return replace(
            self.cfg.loss,
            entropy_coef=self.entropy_coef,
            floor_coef=floor_coef_at(self.step_count, self.cfg.loss),
            magnet_coef=magnet_coef_at(self.step_count, self.cfg.loss),
        )

    def _batch_size(self, seqs: list[TrainingSequence]) -> _BatchSize:
        """What the losses over `seqs` are normalised by."""
        return _BatchSize(
            tokens=sum(len(s.completion_ids) for s in seqs),
            seqs=len(seqs),
            values=sum(s.value_target is not None for s in seqs)
            if self.value_head is not None
            else 0,
        )

    def _accumulate(
        self, seqs: list[TrainingSequence], lcfg: LossConfig, totals: _StepTotals
    ) -> None:
        """Forward, loss and backward over each micro-batch of `seqs`: the gradients add up on
        the policy (and the shared trunk's at the end), the metrics on `totals`. The loss is
        normalised by `seqs`' own counts (with roles: one role's turns, so each adapter's step
        is the one it would take alone)."""
        size = self._batch_size(seqs)
        mbs = self._micro_batches(seqs)
        refs = self._ref_logprobs(mbs) if lcfg.kl_coef > 0 else [None] * len(mbs)
        magnets = self._magnet_logdists(mbs) if lcfg.magnet_coef > 0 else [None] * len(mbs)
        with self._trunk(self.policy, mbs, grad=True):  # its backward at the block's end
            for mb, ref, mag in zip(mbs, refs, magnets):
                loss, m, value_loss = self._loss(mb, ref, mag, lcfg, size)
                if value_loss is not None:  # each micro-batch's share of the batch's value loss
                    totals.value += float(value_loss.detach())
                # gradient checkpointing recomputes layers in the backward: with the forward's
                # attention
                with attention_implementation(self.policy, self.attention):
                    loss.backward()
                totals.add(float(loss.detach()), m)

    def _forward(self, mb: MicroBatch, lcfg: LossConfig, hidden: bool):
        """The policy's pass over `mb` (`_logprobs`), with the entropy (and the floor) taking
        gradients when the loss uses them, computed as a metric when only logged."""
        want = (
            "grad"
            if lcfg.entropy_coef > 0 or lcfg.floor_coef > 0
            else "metric"
            if self.cfg.log_entropy or lcfg.entropy_target > 0
            else None
        )
        return self._logprobs(self.policy, mb, want, hidden=hidden)

    def _loss(
        self,
        mb: MicroBatch,
        ref: torch.Tensor | None,
        mag: torch.Tensor | None,
        lcfg: LossConfig,
        size: _BatchSize,
    ) -> tuple[torch.Tensor, dict[str, float], torch.Tensor | None]:
        """`mb`'s share of the step's loss: the policy loss over the whole batch's counts, plus
        the value loss when the batch has value targets; (loss, metrics, value loss or None).
        `ref`: the reference's log-probabilities; `mag`: the magnet's log-distributions."""
        logp, entropy, state, floor, allowed = self._forward(mb, lcfg, hidden=size.values > 0)
        to_magnet = None
        if lcfg.magnet_coef > 0:
            to_magnet = magnet_kl_at(mb, allowed, mag, logp)
        old = torch.where(mb.has_old[:, None], mb.old_logp, logp.detach())
        loss, m = policy_loss(
            logp,
            old,
            mb.advantages,
            mb.mask,
            lcfg,
            ref_logp=ref,
            entropy=entropy,
            num_tokens=size.tokens,
            num_seqs=size.seqs,
            floor=floor,
            magnet=to_magnet,
        )
        if not size.values:
            return loss, m, None
        err = (self.value_head(state).squeeze(-1) - mb.value_targets) * mb.has_value
        value_loss = 0.5 * (err**2).sum() / size.values
        return loss + self.cfg.value_coef * value_loss, m, value_loss

    def _optimizer_step(self) -> torch.Tensor:
        """Clip the gradients (on the fp32 masters) and step AdamW; round the masters into the
        policy copy and refresh the magnet when due. Returns the gradient norm before clipping."""
        grads_to_masters(trainable_pairs(self.model, self.policy))
        limit = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        if self.roles:  # each adapter clipped alone: one role's gradient never scales another's
            norms = [clip_grad_norm_(self.role_parameters(r), limit) for r in self.roles]
            grad_norm = torch.stack([n.to(self.master_device) for n in norms]).norm()
        else:
            grad_norm = clip_grad_norm_(self.parameters(), limit)
        self.optimizer.step()
        self.step_count += 1
        self._round_masters_into_policy()
        if (
            self.magnet is not None
            and self.cfg.magnet_every
            and self.step_count % self.cfg.magnet_every == 0
        ):
            self.refresh_magnet()
        return grad_norm

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


def _trainable(seqs: list[TrainingSequence]) -> list[TrainingSequence]:
    """The sequences of `seqs` with completion tokens.

    Raises:
        ValueError: none has any, or a sequence's behaviour logprobs do not match its tokens.
    """
    seqs = [s for s in seqs if s.completion_ids]
    if not seqs:
        raise ValueError("no sequences with completion tokens to train on")
    for s in seqs:
        if s.logprobs is not None and len(s.logprobs) != len(s.completion_ids):
            raise ValueError(
                f"a sequence has {len(s.logprobs)} logprobs for {len(s.completion_ids)} completion tokens"
            )
    return seqs


@dataclass(frozen=True)
class _BatchSize:
    """What a step's losses are normalised by."""

    tokens: int  # completion tokens
    seqs: int  # sequences
    values: int  # sequences with a value target (0 without a value head)


@dataclass
class _StepTotals:
    """A step's metrics summed over its micro-batches."""

    sums: dict[str, float] = field(default_factory=dict)  # token-weighted policy-loss metrics
    ratio_min: float = math.inf
    ratio_max: float = -math.inf
    loss: float = 0.0
    value: float = 0.0  # the value loss

    def add(self, loss: float, m: dict[str, float]) -> None:
        """Add a micro-batch's loss and `policy_loss` metrics (weighted by its tokens)."""
        self.loss += loss
        n = m.pop("tokens")
        self.ratio_min, self.ratio_max = (
            min(self.ratio_min, m.pop("ratio_min")),
            max(self.ratio_max, m.pop("ratio_max")),
        )
        for k, v in m.items():
            self.sums[k] = self.sums.get(k, 0.0) + v * n


def _step_metrics(
    totals: _StepTotals, size: _BatchSize, lr: float, grad_norm: torch.Tensor
) -> dict[str, float]:
    """A step's metrics: the token-weighted means of `totals.sums`, the value loss, the loss,
    the gradient norm, the learning rate, the ratio's range and the batch's size."""
    metrics = {k: v / size.tokens for k, v in totals.sums.items()}
    if size.values:
        metrics["value_loss"] = totals.value
    metrics.update(
        loss=totals.loss,
        grad_norm=float(grad_norm),
        lr=lr,
        ratio_min=totals.ratio_min,
        ratio_max=totals.ratio_max,
        tokens=float(size.tokens),
        sequences=float(size.seqs),
    )
    return metrics
